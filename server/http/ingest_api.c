/* ingest.c - the agent protocol's endpoints (docs/protocol.md):
 * POST /ingest/v1/batch, POST /ingest/v2/batch (sessions.h),
 * POST /v1development/profiles (OTLP, otlp.h),
 * POST /ingest/v1/metrics (metrics.h),
 * POST /ingest/v1/symbols/missing and
 * PUT /ingest/v1/symbols/{file id}. */
#include <errno.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdbool.h>
#include <strings.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "server/ingest/batch_decode.h"
#include "server/ingest/codecs.h"
#include "server/store/agents.h"
#include "compress.h"
#include "handlers.h"
#include "jsonw.h"
#include "log.h"
#include "server/metrics/metrics.h"
#include "server/ingest/otlp.h"
#include "server/auth/authz.h"
#include "server/store/projects.h"
#include "server/ingest/sessions.h"
#include "server/store/spanstore.h"
#include "util.h"

#define MAX_MISSING_QUERY 100000

static void count(uint64_t *c, uint64_t v)
{
	__atomic_add_fetch(c, v, __ATOMIC_RELAXED);
}

/* A body that does not decode (what names it): counted, 400, err freed. */
static void refuse(uint64_t *counter, struct http_resp *resp, const char *what, struct buf *err)
{
	count(counter, 1);
	http_error(resp, 400, "invalid %s: %s", what, err->data);
	buf_free(err);
}

/* The id of the project called name, for a request by who that needs
 * permission there: a project is created on first use only by a principal
 * that holds permission in every project. Returns 0, -1 failed, or
 * INGEST_DENIED with the reason in err. */
#define INGEST_DENIED (-4)
static int ingest_project(struct server *srv, const struct principal *who, const char *permission,
			  const char *name, char project[37], struct buf *err)
{
	bool everywhere = principal_everywhere(who, permission);
	int rc = projects_by_name(srv->projects, name, everywhere, project, err);
	if (rc == PROJECTS_FAILED) {
		log_error("ingest: project \"%s\": %s", name, err->data);
		buf_puts(err, " (cannot resolve the project)");
		return -1;
	}
	if (rc == PROJECTS_ABSENT) {
		buf_printf(err, "Insufficient permissions: project \"%.128s\" does not exist and this "
				"credential may not create it (%s in every project)", name, permission);
		return INGEST_DENIED;
	}
	if (!principal_can(who, permission, project)) {
		buf_printf(err, "Insufficient permissions: %s in project %s (\"%.128s\")", permission,
			   project, name);
		return INGEST_DENIED;
	}
	return 0;
}

/* Resolves the project of b and stores it. Returns batch_append's enum
 * store_rc or INGEST_DENIED, with the project id in project. */
static int store_batch(struct server *srv, const struct principal *who,
		       const Ember__Ingest__V1__Batch *b, const void *zbody, size_t zlen,
		       char project[37], struct buf *err)
{
	int rc = ingest_project(srv, who, "ingest:profile:write", b->project, project, err);
	if (rc < 0)
		return rc;
	return batch_append(srv->store, project, b, zbody, zlen, err);
}

/* Adds the values of a stored request to the counter of each kind. */
static void count_kinds(struct server *srv, const uint64_t v[5])
{
	count(&srv->counters.ingest_samples, v[EMBER__INGEST__V1__EVENT_KIND__ON_CPU]);
	count(&srv->counters.ingest_off_cpu_ns, v[EMBER__INGEST__V1__EVENT_KIND__OFF_CPU]);
	count(&srv->counters.ingest_cuda_ns, v[EMBER__INGEST__V1__EVENT_KIND__CUDA]);
	count(&srv->counters.ingest_alloc_bytes, v[EMBER__INGEST__V1__EVENT_KIND__ALLOC]);
}

static void add_kind(struct kind_values *kv, int kind, uint64_t value)
{
	if (kind > 0 && kind < 5)
		kv->v[kind] += value;
}

/* Answers a stored (STORE_OK) or duplicate (STORE_DUPLICATE) batch, or
 * the error rc says (an enum store_rc or INGEST_DENIED).
 * samples (the answer's "samples") is the sum of every value; kv the
 * values by kind, for the counters. */
static void answer(struct server *srv, int rc, uint64_t samples, const struct kind_values *kv,
		   size_t body_len, const char *project, const struct buf *err,
		   struct http_resp *resp)
{
	if (rc == INGEST_DENIED) {
		count(&srv->counters.ingest_unauthorized, 1);
		http_error(resp, 403, "%s", err->data);
		return;
	}
	if (rc == STORE_REFUSED) {
		count(&srv->counters.ingest_rejected, 1);
		http_error(resp, 422, "%s", err->data);
		return;
	}
	if (rc == STORE_BUSY) {
		count(&srv->counters.ingest_failed, 1);
		/* the store says why: behind writing blocks, or ClickHouse
		 * down or slow (--store clickhouse) */
		http_error(resp, 503, "the store cannot take data now (%s); retry later",
			   err->data ? err->data : "busy");
		resp->retry_after = "2";
		return;
	}
	if (rc < 0) {
		count(&srv->counters.ingest_failed, 1);
		log_error("ingest: %s", err->data);
		http_error(resp, 503, "the batch could not be stored: %s", err->data);
		resp->retry_after = "5";
		return;
	}
	if (rc == STORE_DUPLICATE) {
		count(&srv->counters.ingest_duplicates, 1);
	} else {
		count(&srv->counters.ingest_batches, 1);
		if (kv)
			count_kinds(srv, kv->v);
		count(&srv->counters.ingest_bytes, body_len);
	}
	struct jsonw w;
	http_json_begin(resp, &w);
	jsonw_begin_object(&w);
	jsonw_kv_bool(&w, "stored", rc == STORE_OK);
	jsonw_kv_bool(&w, "duplicate", rc == STORE_DUPLICATE);
	jsonw_kv_u64(&w, "samples", samples);
	jsonw_key(&w, "project_id");
	if (project)
		jsonw_str(&w, project);
	else
		jsonw_null(&w);
	jsonw_end_object(&w);
	http_json_end(resp, &w, 200);
}

static bool zstd_encoded(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	const char *enc = http_header(req, "Content-Encoding");
	if (enc && strcmp(enc, "zstd") == 0)
		return true;
	count(&srv->counters.ingest_rejected, 1);
	http_error(resp, 415, "batches must be sent with Content-Encoding: zstd");
	return false;
}

/* Tells the profiler inventory of the agent whose batch was stored (or
 * was a duplicate: seen, no samples added). */
static void note_agent(struct server *srv, const struct http_req *req, const char *instance,
		       const char *project, const char *protocol, uint32_t host_cpus, uint64_t samples)
{
	if (!srv->agents)
		return;
	char addr[64];
	http_client_address(req, addr, sizeof(addr));
	struct agent_note n = {
		.instance = instance, .project = project, .host = http_header(req, "X-Ember-Host"),
		.version = http_header(req, "User-Agent"), .protocol = protocol, .address = addr,
		.host_cpus = host_cpus, .samples = samples,
	};
	agents_seen(srv->agents, &n, now_unix_ms());
}

void handle_ingest_batch(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!zstd_encoded(srv, req, resp))
		return;
	struct buf err = { 0 };
	Ember__Ingest__V1__Batch *b = batch_decode(req->body, req->body_len, &err);
	if (!b) {
		refuse(&srv->counters.ingest_rejected, resp, "batch", &err);
		return;
	}
	char project[37];
	int rc = store_batch(srv, req->who, b, req->body, req->body_len, project, &err);
	uint64_t samples = 0;
	struct kind_values kv = { { 0 } };
	for (size_t i = 0; i < b->n_samples; i++) {
		samples += b->samples[i]->value;
		add_kind(&kv, b->samples[i]->kind, b->samples[i]->value);
	}
	answer(srv, rc, samples, &kv, req->body_len, project, &err, resp);
	if (rc == STORE_OK || rc == STORE_DUPLICATE)
		note_agent(srv, req, b->agent_instance, project, "ember v1", b->host_cpus,
			   rc == STORE_OK ? samples : 0);
	batch_decode_free(b);
	buf_free(&err);
}

/* Host and GPU metrics: 200 only once the batch is committed; 400 for a
 * batch outside the bounds (never retried by the agent), 503 when it
 * could not be stored (retried). */
void handle_ingest_metrics(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!zstd_encoded(srv, req, resp))
		return;
	struct buf err = { 0 };
	Ember__Ingest__V1__MetricsBatch *b = metrics_decode(req->body, req->body_len, &err);
	if (!b) {
		refuse(&srv->counters.metrics_rejected, resp, "metrics batch", &err);
		return;
	}
	char project[37];
	int prc = ingest_project(srv, req->who, "ingest:metrics:write", b->project, project, &err);
	if (prc == INGEST_DENIED) {
		count(&srv->counters.ingest_unauthorized, 1);
		http_error(resp, 403, "%s", err.data);
	} else if (prc < 0 || metrics_store_batch(srv->metrics, project, b, now_unix_ms(), &err) < 0) {
		count(&srv->counters.metrics_failed, 1);
		log_error("ingest metrics: %s", err.data);
		http_error(resp, 503, "the metrics could not be stored: %s", err.data);
		resp->retry_after = "5";
	} else {
		count(&srv->counters.metrics_batches, 1);
		count(&srv->counters.metrics_points, b->n_point_series);
		struct jsonw w;
		http_json_begin(resp, &w);
		jsonw_begin_object(&w);
		jsonw_kv_bool(&w, "stored", true);
		jsonw_kv_u64(&w, "points", b->n_point_series);
		jsonw_kv_u64(&w, "series", b->n_series_names);
		jsonw_kv_str(&w, "project_id", project);
		jsonw_end_object(&w);
		http_json_end(resp, &w, 200);
	}
	metrics_decode_free(b);
	buf_free(&err);
}

/* Protocol version 2: the session gives the store an entry whose log
 * record is the batch as received plus the definitions it needs
 * (server/ingest/sessions.h). */
struct v2_store {
	struct server *srv;
	const struct principal *who;
	char project[37];
	struct buf *err;
	bool denied;
};

/* The spans of a stored batch, for the span store to walk (spanstore.h). */
static void entry_spans(const void *src, span_each_fn each, void *each_ctx)
{
	sessions_spans(src, each, each_ctx);
}

static int store_session(void *ctx, const char *project_name, struct store_entry *e)
{
	struct v2_store *st = ctx;
	int rc = ingest_project(st->srv, st->who, "ingest:profile:write", project_name, st->project,
				st->err);
	if (rc < 0) {
		st->denied = rc == INGEST_DENIED;
		return STORE_FAILED;
	}
	e->project = st->project;
	rc = store_append_entry(st->srv->store, e, st->err);
	/* The batch's GPU spans, once it is stored (a duplicate's were kept
	 * the first time). */
	struct buf why = { 0 };
	if (rc == STORE_OK && st->srv->spans &&
	    span_store_add(st->srv->spans, st->project, entry_spans, e, now_unix_ms(), &why) < 0)
		log_warn("a stored batch's GPU spans: %s", why.data ? why.data : "not kept");
	buf_free(&why);
	return rc;
}

void handle_ingest_session_batch(struct server *srv, const struct http_req *req,
				 struct http_resp *resp)
{
	if (!zstd_encoded(srv, req, resp))
		return;
	struct buf err = { 0 };
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(req->body, req->body_len, &err);
	if (!m) {
		refuse(&srv->counters.ingest_rejected, resp, "batch", &err);
		return;
	}
	struct v2_store st = { .srv = srv, .who = req->who, .err = &err };
	int rc = sessions_ingest(srv->sessions, m, req->body, req->body_len, now_unix_ms(),
				 store_session, &st, &err);
	uint64_t samples = 0;
	struct kind_values kv = { { 0 } };
	for (size_t i = 0; i < m->n_sample_values; i++) {
		samples += m->sample_values[i];
		/* No kinds: every sample is ON_CPU (ingest.proto). */
		add_kind(&kv, m->n_sample_kinds ? (i < m->n_sample_kinds ? (int)m->sample_kinds[i] : 0)
						: EMBER__INGEST__V1__EVENT_KIND__ON_CPU,
			 m->sample_values[i]);
	}
	if (st.denied) {
		count(&srv->counters.ingest_unauthorized, 1);
		http_error(resp, 403, "%s", err.data);
	} else if (rc == SESSION_INVALID) {
		count(&srv->counters.ingest_rejected, 1);
		http_error(resp, 400, "invalid batch: %s", err.data);
	} else if (rc == SESSION_RESYNC) {
		count(&srv->counters.ingest_resyncs, 1);
		struct jsonw w;
		http_json_begin(resp, &w);
		jsonw_begin_object(&w);
		jsonw_kv_str(&w, "error", err.data ? err.data : "start a new session");
		jsonw_kv_bool(&w, "resync", true);
		jsonw_end_object(&w);
		http_json_end(resp, &w, 409);
	} else {
		answer(srv, rc == SESSION_SEEN ? STORE_DUPLICATE : rc, samples, &kv, req->body_len,
		       st.project[0] ? st.project : NULL, &err, resp);
		if ((rc == STORE_OK || rc == SESSION_SEEN) && st.project[0])
			note_agent(srv, req, m->agent_instance, st.project, "ember v2", m->host_cpus,
				   rc == STORE_OK ? samples : 0);
	}
	session_batch_free(m);
	buf_free(&err);
}

/* OTLP: each converted profile is stored like a version 1 batch. Its
 * senders go to the profiler inventory by host.name (an OTLP profiler has
 * no agent instance; a collector may forward many hosts in one request),
 * at most OTLP_SENDERS_MAX a request. */
#define OTLP_SENDERS_MAX 64

struct otlp_sender {
	char host[AGENTS_TEXT_MAX + 1];
	uint64_t samples;
};

struct otlp_store {
	struct server *srv;
	const struct principal *who;
	char project[37];
	struct buf *err;
	int last_rc;
	struct otlp_sender senders[OTLP_SENDERS_MAX];
	size_t nsenders;
};

static const char *resource_host(const Ember__Ingest__V1__Batch *b, uint32_t r)
{
	if (r >= b->n_resources)
		return "";
	const Ember__Ingest__V1__Resource *res = b->resources[r];
	for (size_t i = 0; i + 1 < res->n_attributes; i += 2)
		if (res->attributes[i] < b->n_strings && res->attributes[i + 1] < b->n_strings &&
		    !strcmp(b->strings[res->attributes[i]], "host.name"))
			return b->strings[res->attributes[i + 1]];
	return "";
}

/* Each sample's host found once per resource, not once per sample. */
static void note_senders(struct otlp_store *st, const Ember__Ingest__V1__Batch *b)
{
	size_t nr = b->n_resources;
	int *sender_of = xmalloc((nr ? nr : 1) * sizeof(*sender_of)); /* -2: not looked up, -1: none */
	for (size_t r = 0; r < nr; r++)
		sender_of[r] = -2;
	for (size_t i = 0; i < b->n_samples; i++) {
		uint32_t r = b->samples[i]->resource;
		if (r >= nr)
			continue;
		if (sender_of[r] == -2) {
			const char *host = resource_host(b, r);
			size_t k = 0;
			while (k < st->nsenders && strncmp(st->senders[k].host, host, AGENTS_TEXT_MAX))
				k++;
			if (k == st->nsenders && k < OTLP_SENDERS_MAX) {
				snprintf(st->senders[k].host, sizeof(st->senders[k].host), "%s", host);
				st->nsenders++;
			}
			sender_of[r] = k < st->nsenders ? (int)k : -1;
		}
		if (sender_of[r] >= 0)
			st->senders[sender_of[r]].samples += b->samples[i]->value;
	}
	free(sender_of);
}

static int store_otlp(void *ctx, const Ember__Ingest__V1__Batch *b)
{
	struct otlp_store *st = ctx;
	struct buf z = { 0 };
	int rc = STORE_FAILED;
	if (batch_pack(b, 1, &z) == 0)
		rc = store_batch(st->srv, st->who, b, z.data, z.len, st->project, st->err);
	else
		buf_puts(st->err, "compressing the batch for the log failed");
	buf_free(&z);
	st->last_rc = rc;
	if (rc == STORE_OK)
		note_senders(st, b);
	return rc < 0 ? -2 : 0; /* -1 is otlp_convert's "invalid" */
}

/* The inventory's rows of a stored request's senders: "otlp:HOST" (the
 * client's address when a sample names no host). */
static void note_otlp_senders(struct server *srv, const struct http_req *req, const struct otlp_store *st,
			      bool json)
{
	if (!srv->agents)
		return;
	const char *grpc = http_header(req, "X-Ember-Otlp-Transport");
	const char *protocol = grpc && !req->conn ? "otlp grpc" : json ? "otlp http json" : "otlp http";
	char addr[64];
	http_client_address(req, addr, sizeof(addr));
	for (size_t i = 0; i < st->nsenders; i++) {
		const char *host = st->senders[i].host;
		char instance[AGENTS_TEXT_MAX + 8];
		snprintf(instance, sizeof(instance), "otlp:%s", *host ? host : *addr ? addr : "unknown");
		struct agent_note n = {
			.instance = instance, .project = st->project, .host = host,
			.version = http_header(req, "User-Agent"), .protocol = protocol, .address = addr,
			.samples = st->senders[i].samples,
		};
		agents_seen(srv->agents, &n, now_unix_ms());
	}
}

/* 200 with an ExportProfilesServiceResponse, in the request's encoding:
 * partial_success only when profiles were left out or values changed
 * (then with rejected_profiles 0: a warning, as OTLP allows). */
static void otlp_answer_protobuf(const struct otlp_result *res, struct http_resp *resp)
{
	Ember__Otlp__ExportProfilesServiceResponse out =
		EMBER__OTLP__EXPORT_PROFILES_SERVICE_RESPONSE__INIT;
	Ember__Otlp__ExportProfilesPartialSuccess ps =
		EMBER__OTLP__EXPORT_PROFILES_PARTIAL_SUCCESS__INIT;
	if (res->rejected_profiles || res->message.len) {
		ps.rejected_profiles = (int64_t)res->rejected_profiles;
		ps.error_message = res->message.data;
		out.partial_success = &ps;
	}
	size_t n = ember__otlp__export_profiles_service_response__get_packed_size(&out);
	buf_reserve(&resp->body, n + 1);
	ember__otlp__export_profiles_service_response__pack(&out, (uint8_t *)resp->body.data);
	resp->body.len = n;
	resp->content_type = "application/x-protobuf";
	resp->status = 200;
}

/* The same in the proto3 JSON mapping (int64 as a string). */
static void otlp_answer_json(const struct otlp_result *res, struct http_resp *resp)
{
	struct jsonw w;
	http_json_begin(resp, &w);
	jsonw_begin_object(&w);
	if (res->rejected_profiles || res->message.len) {
		char n[24];
		snprintf(n, sizeof(n), "%llu", (unsigned long long)res->rejected_profiles);
		jsonw_key(&w, "partialSuccess");
		jsonw_begin_object(&w);
		jsonw_kv_str(&w, "rejectedProfiles", n);
		jsonw_kv_str(&w, "errorMessage", res->message.data ? res->message.data : "");
		jsonw_end_object(&w);
	}
	jsonw_end_object(&w);
	http_json_end(resp, &w, 200);
}

/* True when the media type of Content-Type ct is type (parameters such
 * as "; charset=utf-8" may follow). */
static bool media_type_is(const char *ct, const char *type)
{
	size_t n = strlen(type);
	return ct && strncasecmp(ct, type, n) == 0 &&
	       (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t');
}

void handle_otlp_profiles(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	const char *ct = http_header(req, "Content-Type");
	bool json = media_type_is(ct, "application/json");
	if (!json && !media_type_is(ct, "application/x-protobuf")) {
		count(&srv->counters.otlp_rejected, 1);
		http_error(resp, 415, "send OTLP Profiles as Content-Type: application/x-protobuf "
				      "or application/json");
		return;
	}
	const char *enc = http_header(req, "Content-Encoding");
	int gzip = enc && strcmp(enc, "gzip") == 0;
	if (enc && !gzip && strcmp(enc, "identity") != 0) {
		count(&srv->counters.otlp_rejected, 1);
		http_error(resp, 415, "unsupported Content-Encoding %s (use gzip or none)", enc);
		return;
	}
	const char *project = http_query_arg(req, "project");
	if (!project)
		project = "default";
	struct buf err = { 0 };
	if (projects_name_check(project, &err) < 0) {
		http_error(resp, 400, "%s", err.data);
		buf_free(&err);
		return;
	}
	int too_large;
	Ember__Otlp__ExportProfilesServiceRequest *r =
		json ? otlp_decode_json(req->body, req->body_len, gzip, &too_large, &err)
		     : otlp_decode(req->body, req->body_len, gzip, &too_large, &err);
	if (!r) {
		count(&srv->counters.otlp_rejected, 1);
		http_error(resp, too_large ? 413 : 400, "invalid OTLP request: %s", err.data);
		buf_free(&err);
		return;
	}
	struct otlp_store st = { .srv = srv, .who = req->who, .err = &err };
	struct otlp_result res = { 0 };
	int rc = otlp_convert(r, project, now_unix_ms(), store_otlp, &st, &res, &err);
	if (rc == -1) {
		count(&srv->counters.otlp_rejected, 1);
		http_error(resp, 400, "invalid OTLP request: %s", err.data);
	} else if (rc < 0) {
		answer(srv, st.last_rc, 0, NULL, req->body_len, NULL, &err, resp);
	} else {
		count(&srv->counters.otlp_requests, 1);
		note_otlp_senders(srv, req, &st, json);
		count(&srv->counters.ingest_batches, res.batches);
		count_kinds(srv, res.kind_values);
		count(&srv->counters.ingest_bytes, req->body_len);
		if (json)
			otlp_answer_json(&res, resp);
		else
			otlp_answer_protobuf(&res, resp);
	}
	buf_free(&res.message);
	otlp_free(r);
	buf_free(&err);
}

/* The symbol store an upload by who goes to, and that "missing" answers
 * from (symbols.h, "Trust"): the global one for a credential that may write
 * symbols in every project (or symbols:global:write), else the store of
 * the project ?project= names (an id or a name), where who must hold
 * ingest:symbols:write. NULL with the refusal answered. */
static struct symbols *symbol_scope(struct server *srv, const struct http_req *req,
				    struct http_resp *resp)
{
	const struct principal *who = req->who;
	const char *project = http_query_arg(req, "project");
	char id[37] = "";
	struct buf err = { 0 };
	if (project && *project) {
		int rc = PROJECTS_ABSENT;
		if (uuid_valid(project)) {
			snprintf(id, sizeof(id), "%s", project);
			rc = projects_exists(srv->projects, id) ? PROJECTS_FOUND : PROJECTS_ABSENT;
		} else if (strlen(project) <= 128) {
			rc = projects_by_name(srv->projects, project, false, id, &err);
		}
		if (rc != PROJECTS_FOUND) {
			if (rc == PROJECTS_FAILED)
				http_error(resp, 503, "the project could not be looked up: %s", err.data);
			else
				http_error(resp, 404, "no project %.128s", project);
			buf_free(&err);
			return NULL;
		}
	}
	struct symbols *s = NULL;
	if (principal_everywhere(who, "symbols:global:write") ||
	    principal_everywhere(who, "ingest:symbols:write"))
		s = srv->symbols;
	else if (!id[0])
		http_error(resp, 403, "Insufficient permissions: ingest:symbols:write in every project "
				      "(name the project the symbols are for with ?project=)");
	else if (!principal_can(who, "ingest:symbols:write", id))
		auth_deny(srv, who, "ingest:symbols:write", id, resp);
	else if (!(s = symbols_scope(srv->symbols, id, &err))) {
		log_error("%s", err.data);
		http_error(resp, 503, "the project's symbols could not be opened: %s", err.data);
		resp->retry_after = "30";
	}
	buf_free(&err);
	return s;
}

void handle_symbols_missing(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct symbols *sym = symbol_scope(srv, req, resp);
	if (!sym)
		return;
	json_error_t jerr;
	json_t *doc = json_loadb(req->body, req->body_len, 0, &jerr);
	json_t *ids = doc ? json_object_get(doc, "file_ids") : NULL;
	if (!json_is_array(ids) || json_array_size(ids) > MAX_MISSING_QUERY) {
		http_error(resp, 400, "expected {\"file_ids\": [hex ids]} with at most %d ids",
			   MAX_MISSING_QUERY);
		json_decref(doc);
		return;
	}
	/* "quality": the symbol-file flags the asker could provide; a file
	 * stored with fewer counts as missing. */
	json_t *qv = json_object_get(doc, "quality");
	int want = json_is_integer(qv) ? (int)json_integer_value(qv) : 0;
	struct jsonw w;
	http_json_begin(resp, &w);
	jsonw_begin_object(&w);
	jsonw_key(&w, "missing");
	jsonw_begin_array(&w);
	size_t i;
	json_t *v;
	json_array_foreach(ids, i, v)
	{
		struct file_id id;
		const char *s = json_string_value(v);
		if (!s || fileid_parse_hex(s, &id) < 0) {
			http_error(resp, 400, "file_ids[%zu]: expected %d hex digits", i,
				   FILE_ID_HEX_LEN);
			json_decref(doc);
			return;
		}
		int have = symbols_quality(sym, &id);
		/* Nothing yet: the asker uploads what it has next, so queries
		 * say these frames' names are on their way. */
		if (have < 0)
			symbols_expect(sym, &id, now_unix_ms());
		if (have < 0 || __builtin_popcount((unsigned)have) < __builtin_popcount((unsigned)want & 3u)) {
			jsonw_str(&w, s);
		}
	}
	jsonw_end_array(&w);
	jsonw_end_object(&w);
	json_decref(doc);
	http_json_end(resp, &w, 200);
}

/* An upload the store did not take: -1 invalid (400), else storage (503). */
static void refuse_upload(struct server *srv, struct http_resp *resp, int rc, const char *what, const struct buf *err)
{
	if (rc == -1) {
		count(&srv->counters.symbols_rejected, 1);
		http_error(resp, 400, "%s", err->data);
		return;
	}
	log_error("%s: %s", what, err->data);
	http_error(resp, 503, "%s could not be stored: %s", what, err->data);
	resp->retry_after = "30";
}

void handle_symbols_put(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct file_id id;
	if (fileid_parse_hex(req->params[0], &id) < 0) {
		http_error(resp, 400, "file id: expected %d hex digits", FILE_ID_HEX_LEN);
		return;
	}
	struct symbols *sym = symbol_scope(srv, req, resp);
	if (!sym)
		return;
	const char *enc = http_header(req, "Content-Encoding");
	struct buf err = { 0 };
	const void *data = req->body;
	size_t len = req->body_len;
	void *map = NULL;
	if (enc && strcmp(enc, "zstd") == 0) {
		/* Decompressed into an unnamed file in the data dir, never into
		 * memory: a symbol file may be hundreds of MiB. */
		int fd = unnamed_file(srv->data_dir);
		if (fd < 0) {
			log_error("symbols: cannot create a file in %s: %s", srv->data_dir, strerror(errno));
			http_error(resp, 503, "the symbol file could not be stored: %s", strerror(errno));
			resp->retry_after = "30";
			return;
		}
		int rc = zstd_decompress_to_fd(req->body, req->body_len, SYMBOLS_MAX_UPLOAD, fd, &len);
		if (rc == -3) {
			log_error("symbols: cannot write in %s: %s", srv->data_dir, strerror(errno));
			http_error(resp, 503, "the symbol file could not be stored: %s", strerror(errno));
			resp->retry_after = "30";
			close(fd);
			return;
		}
		if (rc < 0) {
			count(&srv->counters.symbols_rejected, 1);
			http_error(resp, rc == -2 ? 413 : 400, rc == -2 ? "symbol file too large"
									 : "body is not a valid zstd frame");
			close(fd);
			return;
		}
		if (len) {
			map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
			if (map == MAP_FAILED) {
				http_error(resp, 503, "cannot map the symbol file: %s", strerror(errno));
				resp->retry_after = "30";
				close(fd);
				return;
			}
		}
		close(fd);
		data = map ? map : "";
	} else if (enc && strcmp(enc, "identity") != 0) {
		http_error(resp, 415, "unsupported Content-Encoding %s (use zstd or none)", enc);
		return;
	}
	uint8_t bid[64];
	int blen = 0;
	const char *bq = http_query_arg(req, "build_id");
	if (bq) {
		size_t bl = strlen(bq);
		if (bl < 2 || bl > 128 || bl % 2 || hex_decode(bq, bl, bid, bl / 2) < 0) {
			http_error(resp, 400, "build_id: expected 2 to 128 hex digits");
			if (map)
				munmap(map, len);
			return;
		}
		blen = (int)(bl / 2);
	}
	int rc = symbols_put(sym, &id, blen ? bid : NULL, blen, data, len, &err);
	if (rc == 1) {
		struct jsonw w;
		http_json_begin(resp, &w);
		jsonw_begin_object(&w);
		jsonw_kv_bool(&w, "stored", false);
		jsonw_kv_str(&w, "kept", "the stored symbols are at least as complete");
		jsonw_end_object(&w);
		http_json_end(resp, &w, 200);
	} else if (rc < 0) {
		refuse_upload(srv, resp, rc, "the symbol file", &err);
	} else {
		count(&srv->counters.symbols_uploaded, 1);
		const char *name = http_query_arg(req, "name");
		log_debug("symbols stored for %s (%s, %zu bytes)", req->params[0],
			 name ? name : "unnamed", len);
		http_json_bool(resp, 201, "stored", true);
	}
	if (map)
		munmap(map, len);
	buf_free(&err);
}

void handle_cubin_put(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	const char *hex = req->params[0];
	uint8_t raw[8];
	if (strlen(hex) != 16 || hex_decode(hex, 16, raw, sizeof(raw)) < 0) {
		http_error(resp, 400, "cubin CRC: expected 16 hex digits");
		return;
	}
	uint64_t crc = 0;
	for (size_t i = 0; i < sizeof(raw); i++)
		crc = crc << 8 | raw[i];
	const char *enc = http_header(req, "Content-Encoding");
	if (enc && strcmp(enc, "identity") != 0) {
		http_error(resp, 415, "unsupported Content-Encoding %s (send the cubin as it is)", enc);
		return;
	}
	struct symbols *sym = symbol_scope(srv, req, resp);
	if (!sym)
		return;
	struct buf err = { 0 };
	int rc = symbols_put_cubin(sym, crc, req->body, req->body_len, &err);
	if (rc == 1) {
		http_json_bool(resp, 200, "stored", false);
	} else if (rc < 0) {
		refuse_upload(srv, resp, rc, "the cubin", &err);
	} else {
		count(&srv->counters.symbols_uploaded, 1);
		log_debug("cubin %s stored (%zu bytes)", hex, req->body_len);
		http_json_bool(resp, 201, "stored", true);
	}
	buf_free(&err);
}
