/* The event loop's deferred calls: made after the round, in order, never
 * inside the code that asked; cancelled means not made; a call may cancel
 * another of its round or free what held its own; what a call asks for
 * waits for the next round; and a round with calls waiting never blocks. */
#include "core/loop.h"

#include "tap.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static char trace[64];

static void note(void *userdata)
{
        strncat(trace, userdata, sizeof(trace) - strlen(trace) - 1);
}

struct holder {
        struct defer d;
        struct defer *victim; /* cancelled by this one's call */
        struct loop *loop;
        struct defer *again; /* asked for by this one's call */
};

static void cancel_other(void *userdata)
{
        struct holder *h = userdata;
        note("c");
        defer_cancel(h->victim);
}

static void free_self(void *userdata)
{
        note("f");
        free(userdata); /* the defer it held goes with it */
}

static void ask_again(void *userdata)
{
        struct holder *h = userdata;
        note("a");
        loop_defer(h->loop, h->again, note, "n");
}

static long long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(void)
{
        struct loop *l;
        if (!ok(loop_new(&l) == 0, "a loop"))
                return done_testing();

        struct defer a = {0}, b = {0}, c = {0};
        loop_defer(l, &a, note, "1");
        loop_defer(l, &b, note, "2");
        loop_defer(l, &c, note, "3");
        loop_defer(l, &a, note, "X"); /* already asked: nothing changes */
        is_str(trace, "", "nothing is called inside loop_defer");
        ok(defer_queued(&a) && defer_queued(&c), "the calls are queued");
        defer_cancel(&b);
        defer_cancel(&b); /* twice is harmless */
        long long t0 = now_ms();
        loop_iterate(l, -1);
        ok(now_ms() - t0 < 1000, "a round with calls waiting does not block");
        is_str(trace, "13", "made after the round, in order; the cancelled one is not made");
        ok(!defer_queued(&a) && !defer_queued(&b), "none is queued after its round");

        /* A call that cancels one later in its round; one that frees its
         * holder; one that asks for another, made the next round. */
        trace[0] = '\0';
        struct defer later = {0}, next = {0};
        struct holder canceller = {.victim = &later};
        struct holder *self = calloc(1, sizeof(*self));
        struct holder asker = {.loop = l, .again = &next};
        loop_defer(l, &canceller.d, cancel_other, &canceller);
        loop_defer(l, &self->d, free_self, self);
        loop_defer(l, &asker.d, ask_again, &asker);
        loop_defer(l, &later, note, "L");
        loop_iterate(l, 0);
        is_str(trace, "cfa",
               "a call cancels another of its round, frees its own holder, asks again");
        ok(defer_queued(&next), "what a call asked for waits for the next round");
        loop_iterate(l, 0);
        is_str(trace, "cfan", "...and is made then");

        /* Cancelled, then asked for again: made once, with the new call. */
        trace[0] = '\0';
        loop_defer(l, &a, note, "x");
        defer_cancel(&a);
        loop_defer(l, &a, note, "y");
        loop_iterate(l, 0);
        is_str(trace, "y", "asked again after a cancel: the new call, once");
        defer_cancel(NULL);
        ok(true, "defer_cancel(NULL) is harmless");
        loop_free(l);
        return done_testing();
}
