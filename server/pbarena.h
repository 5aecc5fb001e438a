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

/* Returns the message or NULL with err set. */
ProtobufCMessage *pb_unpack(const ProtobufCMessageDescriptor *desc, const void *data, size_t len,
			    struct buf *err);
/* Frees a message from pb_unpack (NULL is fine). */
void pb_free(void *msg);

#endif
