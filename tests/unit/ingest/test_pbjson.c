/* Unit tests: the proto3 JSON decoder (server/ingest/pbjson.c) and OTLP/JSON
 * ingest (otlp_decode_json): a JSON request becomes exactly the message
 * the protobuf decoder makes of the same request (compared by packing
 * both), under either field-name spelling, with 64-bit integers as
 * strings or numbers, base64 and hex bytes, enums by name or number; and
 * converts into the same batches. Wrong types, too deep nesting and too
 * many values are refused with the JSON path named. */
#include "testutil.h"

#include <math.h>

#include "buf.h"
#include "compress.h"
#include "ingest.pb-c.h"
#include "server/ingest/otlp.h"
#include "server/ingest/pbarena.h"
#include "server/ingest/pbjson.h"
#include "util.h"

/* JSON written with ' for " (so \' in the text is an escaped quote). */
static char *J(const char *text)
{
	char *s = xstrdup(text);
	for (char *p = s; *p; p++)
		if (*p == '\'')
			*p = '"';
	return s;
}

static void pack(const ProtobufCMessage *m, struct buf *out)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	buf_reset(out);
	buf_reserve(out, n + 1);
	protobuf_c_message_pack(m, (uint8_t *)out->data);
	out->len = n;
}

static const struct pbjson_opts opts = {
	.max_depth = 16,
	.max_items = 1000,
	.max_containers = 100,
	.max_string = 64,
};

/* Decodes text (with ' for ") as desc: the message, or NULL with err set. */
static ProtobufCMessage *dec(const ProtobufCMessageDescriptor *desc, const char *text,
			     struct buf *err, int *too_large)
{
	char *s = J(text);
	int tl;
	buf_reset(err);
	ProtobufCMessage *m = pbjson_decode(desc, s, strlen(s), &opts, too_large ? too_large : &tl,
					    err);
	free(s);
	return m;
}

/* text decodes as desc into a message that packs to exactly want. */
static void assert_packs_to(const ProtobufCMessageDescriptor *desc, const char *text,
			    const struct buf *want)
{
	struct buf err = { 0 }, got = { 0 };
	ProtobufCMessage *m = dec(desc, text, &err, NULL);
	if (!m)
		fail_msg("%s: %s", text, err.data);
	pack(m, &got);
	assert_int_equal(got.len, want->len);
	assert_memory_equal(got.data, want->data, want->len);
	pb_free(m);
	buf_free(&got);
	buf_free(&err);
}

/* text is refused with an error that contains msg. */
static void assert_refused(const ProtobufCMessageDescriptor *desc, const char *text,
			   const char *msg)
{
	struct buf err = { 0 };
	ProtobufCMessage *m = dec(desc, text, &err, NULL);
	if (m)
		fail_msg("accepted: %s", text);
	if (!err.data || !strstr(err.data, msg))
		fail_msg("%s: error \"%s\" does not say \"%s\"", text, err.data ? err.data : "",
			 msg);
	buf_free(&err);
}

/* --- the OTLP request both ways ---------------------------------------------------- */

/* A repeated field of a protobuf-c message: its count and its array. */
#define SET_REPEATED(msg, field, arr) ((msg).n_##field = ARRAY_SIZE(arr), (msg).field = (arr))

/* A small request made with protobuf-c, packed into out. */
static void otlp_request(struct buf *out)
{
	static char *strings[] = { "", "samples", "count", "main", "f.c", "cpu", "nanoseconds",
				   "thread.name", "t1" };
	Ember__Otlp__Function f0 = EMBER__OTLP__FUNCTION__INIT, f1 = EMBER__OTLP__FUNCTION__INIT;
	f1.name_strindex = 3;
	f1.filename_strindex = 4;
	Ember__Otlp__Function *fns[] = { &f0, &f1 };
	Ember__Otlp__Line ln = EMBER__OTLP__LINE__INIT;
	ln.function_index = 1;
	ln.line = 7;
	Ember__Otlp__Line *lines[] = { &ln };
	Ember__Otlp__Location l0 = EMBER__OTLP__LOCATION__INIT, l1 = EMBER__OTLP__LOCATION__INIT,
			      l2 = EMBER__OTLP__LOCATION__INIT;
	SET_REPEATED(l1, lines, lines);
	l2.mapping_index = 1;
	l2.address = 0x401234;
	Ember__Otlp__Location *locs[] = { &l0, &l1, &l2 };
	Ember__Otlp__Mapping m0 = EMBER__OTLP__MAPPING__INIT, m1 = EMBER__OTLP__MAPPING__INIT;
	m1.memory_start = 0x400000;
	m1.memory_limit = UINT64_MAX;
	m1.file_offset = 0x1000;
	m1.filename_strindex = 4;
	Ember__Otlp__Mapping *maps[] = { &m0, &m1 };
	int32_t li[] = { 2, 1 };
	Ember__Otlp__Stack s0 = EMBER__OTLP__STACK__INIT, s1 = EMBER__OTLP__STACK__INIT;
	SET_REPEATED(s1, location_indices, li);
	Ember__Otlp__Stack *stacks[] = { &s0, &s1 };
	Ember__Otlp__AnyValue av = EMBER__OTLP__ANY_VALUE__INIT;
	av.value_case = EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE_STRINDEX;
	av.string_value_strindex = 8;
	Ember__Otlp__KeyValueAndUnit a0 = EMBER__OTLP__KEY_VALUE_AND_UNIT__INIT,
				     a1 = EMBER__OTLP__KEY_VALUE_AND_UNIT__INIT;
	a1.key_strindex = 7;
	a1.value = &av;
	Ember__Otlp__KeyValueAndUnit *attrs[] = { &a0, &a1 };
	static uint8_t trace[16] = { 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
	static uint8_t span[8] = { 0xff, 0, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60 };
	Ember__Otlp__Link k0 = EMBER__OTLP__LINK__INIT, k1 = EMBER__OTLP__LINK__INIT;
	k1.trace_id.data = trace;
	k1.trace_id.len = sizeof(trace);
	k1.span_id.data = span;
	k1.span_id.len = sizeof(span);
	Ember__Otlp__Link *links[] = { &k0, &k1 };
	Ember__Otlp__ProfilesDictionary d = EMBER__OTLP__PROFILES_DICTIONARY__INIT;
	SET_REPEATED(d, string_table, strings);
	SET_REPEATED(d, function_table, fns);
	SET_REPEATED(d, location_table, locs);
	SET_REPEATED(d, mapping_table, maps);
	SET_REPEATED(d, stack_table, stacks);
	SET_REPEATED(d, attribute_table, attrs);
	SET_REPEATED(d, link_table, links);

	int64_t values[] = { 3, -1, 9000000000LL };
	int32_t sattr[] = { 1 };
	Ember__Otlp__Sample sm = EMBER__OTLP__SAMPLE__INIT;
	sm.stack_index = 1;
	SET_REPEATED(sm, values, values);
	SET_REPEATED(sm, attribute_indices, sattr);
	sm.link_index = 1;
	Ember__Otlp__Sample *samples[] = { &sm };
	Ember__Otlp__ValueType st = EMBER__OTLP__VALUE_TYPE__INIT, pt = EMBER__OTLP__VALUE_TYPE__INIT;
	st.type_strindex = 1;
	st.unit_strindex = 2;
	pt.type_strindex = 5;
	pt.unit_strindex = 6;
	static uint8_t pid[4] = { 0, 1, 2, 0xff };
	Ember__Otlp__Profile pr = EMBER__OTLP__PROFILE__INIT;
	pr.sample_type = &st;
	pr.period_type = &pt;
	pr.period = 10000000;
	pr.time_unix_nano = 1700000000123456789ULL;
	pr.duration_nano = 5000000000ULL;
	pr.profile_id.data = pid;
	pr.profile_id.len = sizeof(pid);
	SET_REPEATED(pr, samples, samples);
	Ember__Otlp__Profile *profiles[] = { &pr };
	Ember__Otlp__ScopeProfiles sp = EMBER__OTLP__SCOPE_PROFILES__INIT;
	SET_REPEATED(sp, profiles, profiles);
	Ember__Otlp__ScopeProfiles *sps[] = { &sp };

	Ember__Otlp__AnyValue v_host = EMBER__OTLP__ANY_VALUE__INIT, v_pid = EMBER__OTLP__ANY_VALUE__INIT,
			      v_frac = EMBER__OTLP__ANY_VALUE__INIT, v_on = EMBER__OTLP__ANY_VALUE__INIT;
	v_host.value_case = EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
	v_host.string_value = "h\xc3\xa9";
	v_pid.value_case = EMBER__OTLP__ANY_VALUE__VALUE_INT_VALUE;
	v_pid.int_value = -42;
	v_frac.value_case = EMBER__OTLP__ANY_VALUE__VALUE_DOUBLE_VALUE;
	v_frac.double_value = 0.25;
	v_on.value_case = EMBER__OTLP__ANY_VALUE__VALUE_BOOL_VALUE;
	v_on.bool_value = 1;
	Ember__Otlp__KeyValue kv[4] = { EMBER__OTLP__KEY_VALUE__INIT, EMBER__OTLP__KEY_VALUE__INIT,
					EMBER__OTLP__KEY_VALUE__INIT, EMBER__OTLP__KEY_VALUE__INIT };
	kv[0].key = "host.name";
	kv[0].value = &v_host;
	kv[1].key = "process.pid";
	kv[1].value = &v_pid;
	kv[2].key = "frac";
	kv[2].value = &v_frac;
	kv[3].key = "on";
	kv[3].value = &v_on;
	Ember__Otlp__KeyValue *kvs[] = { &kv[0], &kv[1], &kv[2], &kv[3] };
	Ember__Otlp__Resource res = EMBER__OTLP__RESOURCE__INIT;
	SET_REPEATED(res, attributes, kvs);
	Ember__Otlp__ResourceProfiles rp = EMBER__OTLP__RESOURCE_PROFILES__INIT;
	rp.resource = &res;
	SET_REPEATED(rp, scope_profiles, sps);
	Ember__Otlp__ResourceProfiles *rps[] = { &rp };
	Ember__Otlp__ExportProfilesServiceRequest req =
		EMBER__OTLP__EXPORT_PROFILES_SERVICE_REQUEST__INIT;
	SET_REPEATED(req, resource_profiles, rps);
	req.dictionary = &d;
	pack(&req.base, out);
}

/* The same request in JSON: lowerCamelCase, int64 as strings, bytes as
 * base64, ids as hex, zero values spelled out or left out, unknown fields. */
static const char *otlp_camel =
	"{'resourceProfiles': [{'resource': {'attributes': ["
	"  {'key': 'host.name', 'value': {'stringValue': 'h\\u00e9'}},"
	"  {'key': 'process.pid', 'value': {'intValue': '-42'}},"
	"  {'key': 'frac', 'value': {'doubleValue': 0.25}},"
	"  {'key': 'on', 'value': {'boolValue': true}}], 'droppedAttributesCount': 0},"
	" 'schemaUrl': '', 'scopeProfiles': [{'scope': null, 'profiles': [{"
	"  'sampleType': {'typeStrindex': 1, 'unitStrindex': 2},"
	"  'periodType': {'typeStrindex': 5, 'unitStrindex': 6}, 'period': '10000000',"
	"  'timeUnixNano': '1700000000123456789', 'durationNano': '5000000000',"
	"  'profileId': 'AAEC/w==', 'attributeIndices': [], 'notAField': {'deep': [[[1]]]},"
	"  'samples': [{'stackIndex': 1, 'values': ['3', '-1', '9000000000'],"
	"    'attributeIndices': [1], 'linkIndex': 1, 'timestampsUnixNano': []}]}]}]}],"
	" 'dictionary': {"
	"  'stringTable': ['', 'samples', 'count', 'main', 'f.c', 'cpu', 'nanoseconds',"
	"    'thread.name', 't1'],"
	"  'functionTable': [{}, {'nameStrindex': 3, 'filenameStrindex': 4, 'startLine': '0'}],"
	"  'locationTable': [{}, {'lines': [{'functionIndex': 1, 'line': '7'}]},"
	"    {'mappingIndex': 1, 'address': '4198964'}],"
	"  'mappingTable': [{}, {'memoryStart': '4194304', 'memoryLimit': '18446744073709551615',"
	"    'fileOffset': '4096', 'filenameStrindex': 4}],"
	"  'stackTable': [{}, {'locationIndices': [2, 1]}],"
	"  'attributeTable': [{}, {'keyStrindex': 7, 'value': {'stringValueStrindex': 8}}],"
	"  'linkTable': [{}, {'traceId': 'DEADBEEF0102030405060708090a0b0c', 'spanId': 'ff00102030405060'}]}}";

/* The .proto names, 64-bit integers as numbers, URL-safe base64 without
 * padding, ids as base64 (what a generic proto3 JSON encoder writes). */
static const char *otlp_snake =
	"{'dictionary': {"
	"  'string_table': ['', 'samples', 'count', 'main', 'f.c', 'cpu', 'nanoseconds',"
	"    'thread.name', 't1'],"
	"  'function_table': [{}, {'name_strindex': 3, 'filename_strindex': 4}],"
	"  'location_table': [{'mapping_index': 0}, {'lines': [{'function_index': 1, 'line': 7}]},"
	"    {'mapping_index': 1, 'address': 4198964}],"
	"  'mapping_table': [{}, {'memory_start': 4194304, 'memory_limit': '18446744073709551615',"
	"    'file_offset': 4096.0, 'filename_strindex': '4'}],"
	"  'stack_table': [{}, {'location_indices': ['2', 1]}],"
	"  'attribute_table': [{}, {'key_strindex': 7, 'value': {'string_value_strindex': 8}}],"
	"  'link_table': [{}, {'trace_id': '3q2+7wECAwQFBgcICQoLDA==', 'span_id': '_wAQIDBAUGA'}]},"
	" 'resource_profiles': [{'resource': {'attributes': ["
	"  {'key': 'host.name', 'value': {'string_value': 'h\\u00e9'}},"
	"  {'key': 'process.pid', 'value': {'int_value': -42}},"
	"  {'key': 'frac', 'value': {'double_value': '0.25'}},"
	"  {'key': 'on', 'value': {'bool_value': true}}]},"
	" 'scope_profiles': [{'profiles': [{"
	"  'sample_type': {'type_strindex': 1, 'unit_strindex': 2},"
	"  'period_type': {'type_strindex': 5, 'unit_strindex': 6}, 'period': 1e7,"
	"  'time_unix_nano': 1700000000123456789, 'duration_nano': 5000000000,"
	"  'profile_id': 'AAEC_w',"
	"  'samples': [{'stack_index': 1, 'values': [3, -1, 9000000000],"
	"    'attribute_indices': [1], 'link_index': 1}]}]}]}]}";

static int collect(void *ctx, const Ember__Ingest__V1__Batch *b)
{
	struct buf *all = ctx;
	struct buf one = { 0 };
	pack(&b->base, &one);
	buf_append(all, one.data, one.len);
	buf_free(&one);
	return 0;
}

/* The batches otlp_convert makes of req, packed one after the other. */
static void converted(const Ember__Otlp__ExportProfilesServiceRequest *req, struct buf *out)
{
	struct otlp_result res = { 0 };
	struct buf err = { 0 };
	assert_int_equal(otlp_convert(req, "p", 1700000000000LL, collect, out, &res, &err), 0);
	assert_int_equal(res.batches, 1);
	assert_int_equal(res.samples, 3 + 9000000000ULL);
	buf_free(&res.message);
	buf_free(&err);
}

static void test_otlp_json_equals_protobuf(void **state)
{
	(void)state;
	struct buf pb = { 0 }, err = { 0 }, a = { 0 }, b = { 0 }, ca = { 0 }, cb = { 0 };
	otlp_request(&pb);
	int too_large;
	Ember__Otlp__ExportProfilesServiceRequest *from_pb =
		otlp_decode(pb.data, pb.len, 0, &too_large, &err);
	assert_non_null(from_pb);
	pack(&from_pb->base, &a);
	converted(from_pb, &ca);
	const char *texts[] = { otlp_camel, otlp_snake };
	for (size_t i = 0; i < ARRAY_SIZE(texts); i++) {
		char *s = J(texts[i]);
		for (int gz = 0; gz < 2; gz++) {
			struct buf z = { 0 };
			const char *body = s;
			size_t len = strlen(s);
			if (gz) {
				assert_int_equal(gzip_compress_buf(s, len, 6, &z), 0);
				body = z.data;
				len = z.len;
			}
			buf_reset(&err);
			Ember__Otlp__ExportProfilesServiceRequest *from_json =
				otlp_decode_json(body, len, gz, &too_large, &err);
			if (!from_json)
				fail_msg("text %zu: %s", i, err.data);
			pack(&from_json->base, &b);
			assert_int_equal(b.len, a.len);
			assert_memory_equal(b.data, a.data, a.len);
			/* and the same way into the store */
			buf_reset(&cb);
			converted(from_json, &cb);
			assert_int_equal(cb.len, ca.len);
			assert_memory_equal(cb.data, ca.data, ca.len);
			otlp_free(from_json);
			buf_free(&z);
		}
		free(s);
	}
	otlp_free(from_pb);
	buf_free(&pb);
	buf_free(&a);
	buf_free(&b);
	buf_free(&ca);
	buf_free(&cb);
	buf_free(&err);
}

/* JSON goes through the same checks as protobuf: an index out of range. */
static void test_otlp_json_checked_like_protobuf(void **state)
{
	(void)state;
	struct buf err = { 0 };
	char *s = J("{'resourceProfiles': [{'scopeProfiles': [{'profiles': [{'samples': "
		    "[{'stackIndex': 5, 'values': [1]}]}]}]}], 'dictionary': {'stringTable': ['']}}");
	int too_large;
	Ember__Otlp__ExportProfilesServiceRequest *r =
		otlp_decode_json(s, strlen(s), 0, &too_large, &err);
	assert_non_null(r);
	struct otlp_result res = { 0 };
	struct buf out = { 0 };
	assert_int_equal(otlp_convert(r, "p", 0, collect, &out, &res, &err), -1);
	assert_non_null(strstr(err.data, "samples[0]: an index out of range"));
	assert_int_equal(out.len, 0);
	otlp_free(r);
	free(s);
	buf_free(&err);
}

/* --- the generic decoder ------------------------------------------------------------ */

static const ProtobufCMessageDescriptor *const FRAME = &ember__ingest__v1__frame__descriptor;
static const ProtobufCMessageDescriptor *const BATCH = &ember__ingest__v1__batch__descriptor;
static const ProtobufCMessageDescriptor *const ANYV = &ember__otlp__any_value__descriptor;
static const ProtobufCMessageDescriptor *const REQ =
	&ember__otlp__export_profiles_service_request__descriptor;

static void test_enums_and_names(void **state)
{
	(void)state;
	struct buf want = { 0 };
	Ember__Ingest__V1__Frame f = EMBER__INGEST__V1__FRAME__INIT;
	f.type = EMBER__INGEST__V1__FRAME_TYPE__KERNEL;
	f.address = 0xffffffff81000000ULL;
	f.binary = 4000000000u;
	pack(&f.base, &want);
	assert_packs_to(FRAME, "{'type': 'KERNEL', 'address': '18446744071578845184', 'binary': 4000000000}", &want);
	assert_packs_to(FRAME, "{'type': 1, 'address': '18446744071578845184', 'binary': '4000000000'}", &want);
	assert_packs_to(FRAME, "{'type': '1', 'address': 1.8446744071578845184e19, 'binary': 4e9}", &want);
	/* Open enums keep numbers they do not name. */
	f.type = 99;
	pack(&f.base, &want);
	assert_packs_to(FRAME, "{'type': 99, 'address': '18446744071578845184', 'binary': 4000000000}", &want);
	assert_refused(FRAME, "{'type': 'KERNELS'}", "type: \"KERNELS\" is not a value of enum ember.ingest.v1.FrameType");
	assert_refused(FRAME, "{'type': true}", "type: expected an enum value's name or number");
	assert_refused(FRAME, "{'type': 2147483648}", "type: out of range for enum");

	/* Repeated enums, strings, bytes, nested messages; unknown keys skipped. */
	Ember__Ingest__V1__Batch b = EMBER__INGEST__V1__BATCH__INIT;
	char *strs[] = { "", "a\"b", "\xe2\x82\xac" };
	b.agent_instance = "x";
	b.sequence = UINT64_MAX;
	b.start_unix_ms = INT64_MIN;
	b.end_unix_ms = INT64_MAX;
	SET_REPEATED(b, strings, strs);
	uint8_t id[3] = { 0xfb, 0xff, 0x00 };
	Ember__Ingest__V1__File file = EMBER__INGEST__V1__FILE__INIT;
	file.file_id.data = id;
	file.file_id.len = 3;
	uint64_t seg[] = { 1, 2 };
	SET_REPEATED(file, exec_segments, seg);
	Ember__Ingest__V1__File *files[] = { &file };
	SET_REPEATED(b, files, files);
	Ember__Ingest__V1__Sample s = EMBER__INGEST__V1__SAMPLE__INIT;
	s.kind = EMBER__INGEST__V1__EVENT_KIND__ALLOC;
	s.value = 5;
	Ember__Ingest__V1__Sample *samples[] = { &s, &s };
	SET_REPEATED(b, samples, samples);
	pack(&b.base, &want);
	assert_packs_to(BATCH,
			"{'agentInstance': 'x', 'sequence': '18446744073709551615',"
			" 'startUnixMs': '-9223372036854775808', 'end_unix_ms': 9223372036854775807,"
			" 'strings': ['', 'a\\'b', '\\u20ac'], 'ignored': null, '@type': 'x',"
			" 'files': [{'fileId': '+/8A', 'execSegments': ['1', 2]}],"
			" 'samples': [{'kind': 'ALLOC', 'value': 5}, {'kind': 4, 'value': '5'}]}",
			&want);

	/* An empty object is the empty message; null is absence. */
	Ember__Ingest__V1__Batch empty = EMBER__INGEST__V1__BATCH__INIT;
	pack(&empty.base, &want);
	assert_packs_to(BATCH, "{}", &want);
	assert_packs_to(BATCH, "{'strings': null, 'files': null, 'sequence': null, 'agentInstance': null}", &want);
	assert_packs_to(BATCH, "{'sequence': 0, 'sequence_x': 1, 'Sequence': 2}", &want);
	buf_free(&want);
}

static void test_scalars(void **state)
{
	(void)state;
	struct buf want = { 0 };
	Ember__Otlp__AnyValue v = EMBER__OTLP__ANY_VALUE__INIT;
	v.value_case = EMBER__OTLP__ANY_VALUE__VALUE_INT_VALUE;
	v.int_value = 100;
	pack(&v.base, &want);
	assert_packs_to(ANYV, "{'intValue': 100}", &want);
	assert_packs_to(ANYV, "{'intValue': '100'}", &want);
	assert_packs_to(ANYV, "{'int_value': '1e2'}", &want);
	assert_packs_to(ANYV, "{'intValue': 100.0}", &want);
	assert_packs_to(ANYV, "{'intValue': 1E2}", &want);
	v.value_case = EMBER__OTLP__ANY_VALUE__VALUE_DOUBLE_VALUE;
	v.double_value = INFINITY;
	pack(&v.base, &want);
	assert_packs_to(ANYV, "{'doubleValue': 'Infinity'}", &want);
	v.double_value = 3;
	pack(&v.base, &want);
	assert_packs_to(ANYV, "{'doubleValue': 3}", &want);
	assert_packs_to(ANYV, "{'doubleValue': '3e0'}", &want);
	v.value_case = EMBER__OTLP__ANY_VALUE__VALUE_BYTES_VALUE;
	v.bytes_value.data = (uint8_t *)"hello";
	v.bytes_value.len = 5;
	pack(&v.base, &want);
	assert_packs_to(ANYV, "{'bytesValue': 'aGVsbG8='}", &want);
	assert_packs_to(ANYV, "{'bytesValue': 'aGVsbG8'}", &want);
	v.bytes_value.len = 0;
	pack(&v.base, &want);
	assert_packs_to(ANYV, "{'bytesValue': ''}", &want);
	/* A oneof member set to its zero value is still set. */
	v.value_case = EMBER__OTLP__ANY_VALUE__VALUE_BOOL_VALUE;
	v.bool_value = 0;
	pack(&v.base, &want);
	assert_packs_to(ANYV, "{'boolValue': false, 'stringValue': null}", &want);

	/* Not hex outside the fields named hex: 'abcd' is base64 there. */
	Ember__Otlp__AnyValue b = EMBER__OTLP__ANY_VALUE__INIT;
	b.value_case = EMBER__OTLP__ANY_VALUE__VALUE_BYTES_VALUE;
	b.bytes_value.data = (uint8_t *)"\x69\xb7\x1d";
	b.bytes_value.len = 3;
	pack(&b.base, &want);
	assert_packs_to(ANYV, "{'bytesValue': 'abcd'}", &want);
	buf_free(&want);
}

static void test_wrong_types(void **state)
{
	(void)state;
	const struct {
		const ProtobufCMessageDescriptor *desc;
		const char *text, *msg;
	} cases[] = {
		{ ANYV, "[]", "(root): expected an object" },
		{ ANYV, "{'intValue': 'x'}", "intValue: expected an integer" },
		{ ANYV, "{'intValue': ''}", "intValue: expected an integer" },
		{ ANYV, "{'intValue': ' 1'}", "intValue: expected an integer" },
		{ ANYV, "{'intValue': '01'}", "intValue: expected an integer" },
		{ ANYV, "{'intValue': '0x10'}", "intValue: expected an integer" },
		{ ANYV, "{'intValue': 1.5}", "intValue: expected an integer" },
		{ ANYV, "{'intValue': true}", "intValue: expected an integer" },
		{ ANYV, "{'intValue': '9223372036854775808'}", "intValue: out of range for int64" },
		{ ANYV, "{'intValue': 1e19}", "intValue: out of range for int64" },
		{ ANYV, "{'stringValueStrindex': 2147483648}", "out of range for int32" },
		{ ANYV, "{'stringValueStrindex': '-2147483649'}", "out of range for int32" },
		{ ANYV, "{'boolValue': 1}", "boolValue: expected true or false" },
		{ ANYV, "{'boolValue': 'true'}", "boolValue: expected true or false" },
		{ ANYV, "{'stringValue': 5}", "stringValue: expected a string" },
		{ ANYV, "{'doubleValue': 'nan'}", "doubleValue: expected a number" },
		{ ANYV, "{'doubleValue': '1e999'}", "doubleValue: out of range for double" },
		{ ANYV, "{'bytesValue': 'a'}", "bytesValue: expected base64" },
		{ ANYV, "{'bytesValue': 'ab!d'}", "bytesValue: expected base64" },
		{ ANYV, "{'bytesValue': 'ab=d'}", "bytesValue: expected base64" },
		{ ANYV, "{'bytesValue': 7}", "bytesValue: expected a base64 string" },
		{ ANYV, "{'arrayValue': []}", "arrayValue: expected an object" },
		{ ANYV, "{'arrayValue': {'values': {}}}", "arrayValue.values: expected an array" },
		{ ANYV, "{'arrayValue': {'values': [{}, null]}}", "arrayValue.values[1]: null in a repeated field" },
		{ ANYV, "{'kvlistValue': {'values': [{'key': 'k', 'value': {'intValue': {}}}]}}",
		  "kvlistValue.values[0].value.intValue: expected an integer" },
		{ ANYV, "{'stringValue': 'a', 'intValue': 1}", "intValue: a second member of the same oneof" },
		{ ANYV, "{'intValue': 1, 'int_value': 1}", "int_value: field int_value given twice" },
		{ ANYV, "{'intValue': 1, 'intValue': 2}", "not valid JSON: duplicate object key" },
		{ ANYV, "{'stringValue': '\\u0000'}", "not valid JSON" },
		{ ANYV, "{'stringValue': 'a'} x", "not valid JSON" },
		{ ANYV, "{'stringValue': 'a'", "not valid JSON" },
		{ ANYV, "", "not valid JSON" },
		{ ANYV, "{'intValue': 18446744073709551616}", "not valid JSON" },
		{ REQ,
		  "{'resourceProfiles': [{'scopeProfiles': [{}, {'profiles': [{'samples': "
		  "[{}, {}, {}, {'stackIndex': [1]}]}]}]}]}",
		  "resourceProfiles[0].scopeProfiles[1].profiles[0].samples[3].stackIndex: expected an integer" },
		{ FRAME, "{'file': -1}", "file: out of range for uint32" },
		{ FRAME, "{'address': '-1'}", "address: out of range for uint64" },
		{ FRAME, "{'address': -1}", "address: out of range for uint64" },
		{ FRAME, "{'address': '18446744073709551616'}", "address: out of range for uint64" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		assert_refused(cases[i].desc, cases[i].text, cases[i].msg);
}

/* text = open, then each n times, then close. */
static void repeated(struct buf *text, const char *open, size_t n, const char *each, const char *close)
{
	buf_reset(text);
	buf_puts(text, open);
	for (size_t i = 0; i < n; i++)
		buf_puts(text, each);
	buf_puts(text, close);
}

/* An AnyValue text refused with exactly msg; too_large as said. */
static void assert_refused_whole(const char *text, const char *msg, int too_large)
{
	struct buf err = { 0 };
	int large = -1;
	assert_null(dec(ANYV, text, &err, &large));
	assert_string_equal(err.data, msg);
	assert_int_equal(large, too_large);
	buf_free(&err);
}

static void test_bounds(void **state)
{
	(void)state;
	struct buf err = { 0 }, text = { 0 };
	int too_large;
	/* Nesting: AnyValue in AnyValue, 3 JSON levels each: 5 (16 levels
	 * with the innermost {}) pass, 6 do not, before jansson parses. */
	for (int levels = 4; levels <= 6; levels++) {
		buf_reset(&text);
		for (int i = 0; i < levels; i++)
			buf_puts(&text, "{'arrayValue': {'values': [");
		buf_puts(&text, "{}");
		for (int i = 0; i < levels; i++)
			buf_puts(&text, "]}}");
		ProtobufCMessage *m = dec(ANYV, text.data, &err, &too_large);
		if (levels <= 5) {
			if (!m)
				fail_msg("%d levels: %s", levels, err.data);
			const Ember__Otlp__AnyValue *v = (const Ember__Otlp__AnyValue *)m;
			for (int i = 0; i < levels; i++) {
				assert_int_equal(v->value_case, EMBER__OTLP__ANY_VALUE__VALUE_ARRAY_VALUE);
				assert_int_equal(v->array_value->n_values, 1);
				v = v->array_value->values[0];
			}
			assert_int_equal(v->value_case, EMBER__OTLP__ANY_VALUE__VALUE__NOT_SET);
			pb_free(m);
		} else {
			assert_null(m);
			assert_string_equal(err.data, "JSON nested deeper than 16 levels");
			assert_int_equal(too_large, 0);
		}
	}
	/* Deep nesting in a field nobody reads counts too. */
	repeated(&text, "{'x': ", 5000, "[", "");
	assert_null(dec(ANYV, text.data, &err, &too_large));
	assert_non_null(strstr(err.data, "nested deeper"));
	/* A huge array: refused as too large. */
	repeated(&text, "{'arrayValue': {'values': [", 1000, "{},", "{}]}}");
	assert_refused_whole(text.data, "JSON with more than 100 objects and arrays", 1);
	repeated(&text, "{'x': [", 1000, "1,", "1]}");
	assert_refused_whole(text.data, "JSON with more than 1000 values", 1);
	/* Commas, brackets and colons inside strings are not counted. */
	repeated(&text, "{'stringValue': '", 12, ",:[{\\'", "'}");
	ProtobufCMessage *m = dec(ANYV, text.data, &err, &too_large);
	if (!m)
		fail_msg("%s", err.data);
	assert_int_equal(strlen(((Ember__Otlp__AnyValue *)m)->string_value), 12 * 5);
	pb_free(m);
	/* Strings and bytes: at most max_string (64) bytes. */
	repeated(&text, "{'stringValue': '", 65, "a", "'}");
	assert_refused_whole(text.data, "stringValue: longer than 64 bytes", 1);
	repeated(&text, "{'bytesValue': '", 88, "A", "'}");
	assert_refused_whole(text.data, "bytesValue: longer than 64 bytes", 1);
	buf_free(&text);
	buf_free(&err);
}

/* OTLP's own bounds: refused by the count before jansson builds a tree. */
static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	do {
		p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return n;
}

static size_t varint_len(uint64_t v)
{
	uint8_t tmp[10];
	return put_varint(tmp, v);
}

/* An AnyValue holding an array holding an AnyValue ..., levels deep. */
static uint8_t *nested_any_value(size_t levels, size_t *len)
{
	uint64_t *s = xcalloc(levels + 1, sizeof(*s)), *a = xcalloc(levels + 1, sizeof(*a));
	for (size_t k = 1; k <= levels; k++) {
		a[k] = 1 + varint_len(s[k - 1]) + s[k - 1];
		s[k] = 1 + varint_len(a[k]) + a[k];
	}
	uint8_t *b = xmalloc(s[levels] + 1), *p = b;
	for (size_t k = levels; k >= 1; k--) {
		*p++ = 0x2a; /* array_value = 5 */
		p += put_varint(p, a[k]);
		*p++ = 0x0a; /* values = 1 */
		p += put_varint(p, s[k - 1]);
	}
	*len = (size_t)(p - b);
	assert_int_equal(*len, s[levels]);
	free(s);
	free(a);
	return b;
}

/* The protobuf decoder's own bounds: nesting (protobuf-c recurses per
 * level) and decoded size (an empty submessage is 2 bytes on the wire). */
static void test_protobuf_bounds(void **state)
{
	(void)state;
	struct buf err = { 0 };
	size_t len;
	uint8_t *b = nested_any_value(PB_MAX_DEPTH / 2 - 1, &len); /* two messages a level */
	ProtobufCMessage *m = pb_unpack(&ember__otlp__any_value__descriptor, b, len, &err);
	assert_non_null(m);
	pb_free(m);
	free(b);
	b = nested_any_value(200000, &len);
	m = pb_unpack(&ember__otlp__any_value__descriptor, b, len, &err);
	assert_null(m);
	assert_non_null(strstr(err.data, "nest more than"));
	free(b);
	/* A profile of 2 M empty samples: 4 MB on the wire, far more decoded. */
	size_t n = 2000000;
	b = xmalloc(2 * n);
	for (size_t i = 0; i < n; i++) {
		b[2 * i] = 0x12; /* samples = 2 */
		b[2 * i + 1] = 0;
	}
	buf_reset(&err);
	m = pb_unpack(&ember__otlp__profile__descriptor, b, 2 * n, &err);
	assert_null(m);
	assert_non_null(strstr(err.data, "decodes to more than"));
	free(b);
	buf_free(&err);
}

static void test_otlp_json_bounds(void **state)
{
	(void)state;
	struct buf text = { 0 }, err = { 0 };
	int too_large;
	repeated(&text, "{\"x\":[", OTLP_JSON_MAX_CONTAINERS, "{},", "{}]}");
	assert_null(otlp_decode_json(text.data, text.len, 0, &too_large, &err));
	assert_int_equal(too_large, 1);
	assert_string_equal(err.data, "JSON with more than 4194304 objects and arrays");
	buf_reset(&err);
	repeated(&text, "{\"x\":[", OTLP_JSON_MAX_VALUES, "0,", "0]}");
	assert_null(otlp_decode_json(text.data, text.len, 0, &too_large, &err));
	assert_int_equal(too_large, 1);
	assert_string_equal(err.data, "JSON with more than 16777216 values");
	buf_free(&text);
	buf_free(&err);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_otlp_json_equals_protobuf),
	cmocka_unit_test(test_otlp_json_checked_like_protobuf),
	cmocka_unit_test(test_enums_and_names),
	cmocka_unit_test(test_scalars),
	cmocka_unit_test(test_wrong_types),
	cmocka_unit_test(test_bounds),
	cmocka_unit_test(test_otlp_json_bounds),
	cmocka_unit_test(test_protobuf_bounds))
