/* Waiting in a test, bounded: the loop turns until `cond` holds or `ms`
 * milliseconds passed; the value is whether it holds. A test waits for
 * the state it needs, never for a fixed time. */
#pragma once

#include "core/loop.h"
#include "core/util.h"

#include <stdbool.h>

#define LOOP_WAIT(loop, cond, ms)                                                                  \
        ({                                                                                         \
                long long end_ = now_ms() + (ms);                                                  \
                while (!(cond) && now_ms() < end_)                                                 \
                        loop_iterate((loop), 10);                                                  \
                (bool)(cond);                                                                      \
        })
