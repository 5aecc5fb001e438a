/* pbjson.h - hostile JSON into protobuf-c messages (the proto3 JSON
 * mapping), driven by the descriptors protoc-c generates.
 *
 * pbjson_decode() parses a JSON document with jansson and fills the same
 * ProtobufCMessage that protobuf_c_message_unpack() would make of the
 * equivalent protobuf, in one arena (pbarena.h): free it with pb_free().
 * Whatever reads the message cannot tell which encoding it came from, so
 * it must validate it the same way (indexes, lengths, ...).
 *
 * What is accepted, per the proto3 JSON mapping:
 *   - an object per message; keys are a field's lowerCamelCase JSON name
 *     ("stackIndex") or its name in the .proto file ("stack_index"); keys
 *     of no field are ignored; one field given under both names, or two
 *     members of one oneof, is an error;
 *   - null for any field means the field is absent (its default);
 *   - integers: a JSON number or a string holding one ("12", "-3",
 *     "1e2"), integral and in the field's range; 64-bit ones above
 *     2^63-1 only as strings (jansson refuses larger number literals);
 *   - float and double: a number, a numeric string, "NaN", "Infinity",
 *     "-Infinity";
 *   - bool: true or false;
 *   - string: a JSON string (UTF-8, no \u0000);
 *   - bytes: base64, standard or URL-safe alphabet, padding optional; for
 *     the fields named in opts->hex_bytes also hex (OTLP sends trace,
 *     span and profile ids as hex): a string of an even number of hex
 *     digits is read as hex, anything else as base64;
 *   - enum: its value's name or an int32;
 *   - repeated: an array (null: empty) whose elements are not null.
 * Not supported (none of ember's messages has them): map fields, the
 * well-known types' special forms (Timestamp, Duration, wrappers, Any,
 * Struct), proto2 groups and extensions. Required (proto2) fields must be
 * present.
 *
 * Bounds: before jansson builds anything, one pass over the text counts
 * nesting depth, containers (objects and arrays) and items (values and
 * keys); deeper than opts->max_depth is an error, more containers or
 * items than max_containers and max_items is "too large". jansson's tree
 * takes about 250 bytes a container and 40 to 100 an other item, so those
 * counts bound its memory. Strings and decoded bytes are at most
 * opts->max_string bytes ("too large"). The caller bounds len.
 *
 * Errors name the place in the document as a JSON path of the keys the
 * client sent: "resourceProfiles[0].scopeProfiles[1].profiles[0]
 * .samples[3].stackIndex: expected an integer".
 */
#ifndef EMBER_SERVER_PBJSON_H
#define EMBER_SERVER_PBJSON_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "buf.h"

struct pbjson_opts {
	unsigned max_depth;	      /* nesting of JSON arrays and objects */
	size_t max_items;	      /* JSON values plus object keys in the document */
	size_t max_containers;	      /* JSON objects and arrays in the document */
	size_t max_string;	      /* bytes of one string, or of one bytes field decoded */
	const char *const *hex_bytes; /* NULL, or NULL-terminated full names of bytes
				       * fields ("pkg.Message.field") also read as hex */
};

/* Decodes json[0..len) into a message of desc. Returns it (free with
 * pb_free) or NULL with err set; *too_large is set when the document has
 * more containers or items, or a longer string, than opts allows (or
 * memory ran out): a 413 rather than a 400. */
ProtobufCMessage *pbjson_decode(const ProtobufCMessageDescriptor *desc, const void *json,
				size_t len, const struct pbjson_opts *opts, int *too_large,
				struct buf *err);

#endif
