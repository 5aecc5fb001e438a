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
	size_t allocated, budget; /* bytes of chunks; at most budget (0 = no limit) */
	bool over_budget;
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
		if (a->budget && (cap > a->budget || a->allocated > a->budget - cap)) {
			a->over_budget = true;
			return NULL; /* protobuf-c then gives up on the message */
		}
		a->allocated += cap;
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

/* Reads a varint at *p (< end); false when it is cut or too long. */
static bool wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
	uint64_t v = 0;
	for (int shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return true;
		}
	}
	return false;
}

/* Whether the submessages of [p, end), a desc message, nest at most depth
 * levels deeper. protobuf-c unpacks nested messages by recursion, with no
 * limit: a few bytes per level (OTLP's AnyValue holds lists of AnyValues)
 * would otherwise exhaust the stack. Anything else malformed is left to
 * protobuf-c. */
static bool depth_ok(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end,
		     int depth)
{
	if (depth < 0)
		return false;
	while (p < end) {
		uint64_t tag, n;
		if (!wire_varint(&p, end, &tag))
			return true;
		switch (tag & 7) {
		case 0:
			if (!wire_varint(&p, end, &n))
				return true;
			break;
		case 1:
			if (end - p < 8)
				return true;
			p += 8;
			break;
		case 5:
			if (end - p < 4)
				return true;
			p += 4;
			break;
		case 2: {
			if (!wire_varint(&p, end, &n) || n > (uint64_t)(end - p))
				return true;
			const ProtobufCFieldDescriptor *f =
				desc ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3)) : NULL;
			if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
			    !depth_ok(f->descriptor, p, p + n, depth - 1))
				return false;
			p += n;
			break;
		}
		default:
			return true; /* groups and bad wire types: protobuf-c refuses them */
		}
	}
	return true;
}

ProtobufCMessage *pb_unpack(const ProtobufCMessageDescriptor *desc, const void *data, size_t len,
			    struct buf *err)
{
	if (!depth_ok(desc, data, (const uint8_t *)data + len, PB_MAX_DEPTH)) {
		buf_printf(err, "body is not a valid %s protobuf: messages nest more than %d levels deep",
			   desc->name, PB_MAX_DEPTH);
		return NULL;
	}
	struct arena *a = xcalloc(1, sizeof(*a) + desc->sizeof_message);
	/* Decoded, a message may be many times its wire size (an empty
	 * submessage is 2 bytes on the wire, a struct in memory): bounded. */
	a->budget = len > (PB_MAX_DECODED - (16u << 20)) / 32 ? PB_MAX_DECODED : 32 * len + (16u << 20);
	struct arena_first f = { a, desc->sizeof_message, false };
	ProtobufCAllocator alloc = { first_alloc, arena_free_one, &f };
	ProtobufCMessage *m = protobuf_c_message_unpack(desc, &alloc, len, (const uint8_t *)data);
	if (!m) {
		bool big = a->over_budget;
		size_t budget = a->budget;
		arena_release(a);
		if (big)
			buf_printf(err, "body is not a valid %s protobuf: it decodes to more than %zu MiB",
				   desc->name, budget >> 20);
		else
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
