/* pbarena.c - see pbarena.h. */
#include "pbarena.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* protobuf-c allocates every submessage, string and array separately; a
 * batch has thousands. They all come from one arena here, freed at once.
 * The arena's header sits in front of the first allocation, which
 * protobuf-c makes for the top-level message: pb_unpack checks that,
 * so pb_free can find the arena from the message. */
struct arena_chunk {
	struct arena_chunk *next;
	size_t used, cap;
	max_align_t data[];
};

struct arena {
	struct arena_chunk *chunks;
	max_align_t first[]; /* the message */
};

#define ARENA_CHUNK (256u << 10)

static void *arena_alloc(void *data, size_t size)
{
	struct arena *a = data;
	size = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
	struct arena_chunk *c = a->chunks;
	if (!c || c->cap - c->used < size) {
		size_t cap = size > ARENA_CHUNK ? size : ARENA_CHUNK;
		struct arena_chunk *n = malloc(sizeof(*n) + cap);
		if (!n)
			return NULL;
		n->next = c;
		n->used = 0;
		n->cap = cap;
		a->chunks = c = n;
	}
	void *p = (char *)c->data + c->used;
	c->used += size;
	return p;
}

static void arena_free_one(void *data, void *p)
{
	(void)data;
	(void)p; /* everything goes with the arena */
}

static void arena_release(struct arena *a)
{
	for (struct arena_chunk *c = a->chunks, *next; c; c = next) {
		next = c->next;
		free(c);
	}
	free(a);
}

/* The first allocation is placed in the header's own block. */
struct arena_first {
	struct arena *a;
	size_t first_size;
	bool used;
};

static void *first_alloc(void *data, size_t size)
{
	struct arena_first *f = data;
	if (!f->used && size <= f->first_size) {
		f->used = true;
		return f->a->first;
	}
	return arena_alloc(f->a, size);
}

ProtobufCMessage *pb_unpack(const ProtobufCMessageDescriptor *desc, const void *data, size_t len,
			    struct buf *err)
{
	struct arena *a = xcalloc(1, sizeof(*a) + desc->sizeof_message);
	struct arena_first f = { a, desc->sizeof_message, false };
	ProtobufCAllocator alloc = { first_alloc, arena_free_one, &f };
	ProtobufCMessage *m = protobuf_c_message_unpack(desc, &alloc, len, (const uint8_t *)data);
	if (!m) {
		arena_release(a);
		buf_printf(err, "body is not a valid %s protobuf", desc->name);
		return NULL;
	}
	if ((void *)m != (void *)a->first) {
		/* protobuf-c allocated something else first: cannot happen with
		 * the versions ember supports, and must not be freed wrongly. */
		arena_release(a);
		buf_puts(err, "internal error: unexpected protobuf-c allocation order");
		return NULL;
	}
	return m;
}

static struct arena *arena_of(void *m)
{
	return (struct arena *)((char *)m - offsetof(struct arena, first));
}

ProtobufCMessage *pb_new(const ProtobufCMessageDescriptor *desc)
{
	struct arena *a = xcalloc(1, sizeof(*a) + desc->sizeof_message);
	ProtobufCMessage *m = (ProtobufCMessage *)a->first;
	desc->message_init(m);
	return m;
}

void *pb_alloc(ProtobufCMessage *root, size_t n)
{
	void *p = arena_alloc(arena_of(root), n);
	if (p)
		memset(p, 0, n);
	return p;
}

void pb_free(void *m)
{
	if (m)
		arena_release(arena_of(m));
}
