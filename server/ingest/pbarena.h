/* pbarena.h - unpacking hostile protobuf messages into one arena.
 *
 * protobuf-c allocates every submessage, string and array separately; an
 * agent batch or an OTLP request has thousands. pb_unpack() gives them
 * all to one arena, freed at once by pb_free(), and reports a message
 * that protobuf-c refuses (malformed, truncated, wrong wire types) as an
 * error naming the message type. The caller bounds the input size.
 */
#ifndef EMBER_SERVER_PBARENA_H
#define EMBER_SERVER_PBARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "buf.h"

/* Limits of pb_unpack: how deep messages may nest (protobuf-c recurses
 * once per level), and how much memory the decoded message may take (32
 * times the input plus 16 MiB, at most this). */
#define PB_MAX_DEPTH 64
#define PB_MAX_DECODED ((size_t)1 << 30)

/* Returns the message or NULL with err set. */
ProtobufCMessage *pb_unpack(const ProtobufCMessageDescriptor *desc, const void *data, size_t len,
			    struct buf *err);
/* A new message of desc, initialized by the descriptor (proto3 defaults),
 * at the start of its own arena: for decoders that fill a message
 * themselves (pbjson.h). Never NULL. */
ProtobufCMessage *pb_new(const ProtobufCMessageDescriptor *desc);
/* n bytes, zeroed and aligned for any type, from the arena of root (a
 * message from pb_new or pb_unpack); they are freed with root. NULL when
 * memory ran out. */
void *pb_alloc(ProtobufCMessage *root, size_t n);
/* Frees a message from pb_unpack or pb_new, with everything allocated in
 * its arena (NULL is fine). */
void pb_free(void *msg);

#endif
