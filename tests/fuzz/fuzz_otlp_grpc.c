/* Fuzz target: the server's OTLP over gRPC layer (server/http/otlp_grpc.h) as
 * a client's bytes reach it: the HTTP/2 connection preface and frames
 * (nghttp2), the request headers ember checks (method, path, content
 * type, grpc-encoding, metadata), the message framing and size caps, and
 * a complete request's message through the OTLP decoder. The input is
 * what the client sends on one connection, fed in pieces as a socket
 * would hand it over; nothing is stored. */
#include <stdint.h>
#include <stdlib.h>

#include "server/http/otlp_grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > (1u << 20))
		return 0;
	int n = otlp_grpc_feed(data, size);
	/* A request needs at least a HEADERS and its END_STREAM: 9 bytes of
	 * frame header each, after the 24-byte preface. */
	if (n < 0 || (n > 0 && size < 24 + 9 * 2))
		abort();
	return 0;
}
