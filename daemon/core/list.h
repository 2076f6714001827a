/* The daemon's one linked list: intrusive and doubly linked. The owner
 * holds a `struct list` head (list_init'ed, or LIST_HEAD_INIT), each
 * element a `struct list` node per list it can be on. A zeroed node is
 * unlinked, so calloc'ed elements need no set-up, and list_del is
 * idempotent: an element can be taken off whatever list it is on, or none.
 * Insertion and removal are O(1). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct list {
        struct list *prev, *next;
};

#define LIST_HEAD_INIT(name)                                                                       \
        {                                                                                          \
                &(name), &(name)                                                                   \
        }

static inline void list_init(struct list *head)
{
        head->prev = head->next = head;
}

static inline bool list_empty(const struct list *head)
{
        return head->next == head;
}

/* Whether a node is on a list (a zeroed or removed node is not). */
static inline bool list_linked(const struct list *node)
{
        return node->next != NULL;
}

static inline void list_insert_between(struct list *node, struct list *prev, struct list *next)
{
        node->prev = prev;
        node->next = next;
        prev->next = node;
        next->prev = node;
}

/* At the front (a stack), or at the back (a queue). */
static inline void list_push(struct list *head, struct list *node)
{
        list_insert_between(node, head, head->next);
}

static inline void list_append(struct list *head, struct list *node)
{
        list_insert_between(node, head->prev, head);
}

static inline void list_del(struct list *node)
{
        if (!node->next)
                return;
        node->prev->next = node->next;
        node->next->prev = node->prev;
        node->prev = node->next = NULL;
}

/* Every node of `from` moves, in order, to the end of `to`. */
static inline void list_splice_tail(struct list *to, struct list *from)
{
        if (list_empty(from))
                return;
        struct list *first = from->next, *last = from->prev;
        first->prev = to->prev;
        to->prev->next = first;
        last->next = to;
        to->prev = last;
        list_init(from);
}

static inline size_t list_length(const struct list *head)
{
        size_t n = 0;
        for (const struct list *p = head->next; p != head; p = p->next)
                n++;
        return n;
}

#define list_entry(node, type, member) ((type *)((char *)(node)-offsetof(type, member)))

/* The first element, or NULL when the list is empty. */
#define list_first(head, type, member)                                                             \
        (list_empty(head) ? NULL : list_entry((head)->next, type, member))

/* `pos` is each element in turn. The _safe form allows removing `pos` (and
 * only it) inside the loop. */
#define list_for_each(pos, head, member)                                                           \
        for (pos = list_entry((head)->next, __typeof__(*pos), member); &pos->member != (head);     \
             pos = list_entry(pos->member.next, __typeof__(*pos), member))

#define list_for_each_safe(pos, tmp, head, member)                                                 \
        for (pos = list_entry((head)->next, __typeof__(*pos), member),                             \
            tmp = list_entry(pos->member.next, __typeof__(*pos), member);                          \
             &pos->member != (head);                                                               \
             pos = tmp, tmp = list_entry(tmp->member.next, __typeof__(*pos), member))
