/* otlp_export.h - the agent's OTLP Profiles encoding (-ember-protocol=false).
 *
 * otlp_encode() writes one interval's batch (batch.h) as a gzip-compressed
 * OTLP ExportProfilesServiceRequest (profiles v1development, the
 * opentelemetry-proto 1.10+ layout), the way OpenTelemetry's own eBPF
 * profiler reports: one request per interval with its own dictionary, one
 * ResourceProfiles per process, thread.name as a sample attribute, native
 * frames as (mapping, address) with the file id in the mapping's
 * process.executable.build_id.htlhash attribute, symbolized frames as
 * functions, profile.frame.type on every location, one Profile per event
 * kind of a process: on-CPU with sample type samples/count, off-CPU with
 * off_cpu/nanoseconds, both with period cpu/nanoseconds (1e9 / the on-CPU
 * rate). Stateless: nothing is
 * remembered between requests. docs/protocol.md §5 says how ember-server
 * reads it back.
 */
#ifndef EMBER_AGENT_OTLP_EXPORT_H
#define EMBER_AGENT_OTLP_EXPORT_H

#include "batch.h"
#include "buf.h"

/* Appends the gzip-compressed request to out. Returns 0 or -1. */
int otlp_encode(const struct batch *b, const struct batch_meta *meta, struct buf *out);

#endif
