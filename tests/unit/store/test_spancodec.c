/* Unit tests: a GPU span's origin as bytes (server/store/spancodec.c):
 * the round trip of frames (with and without a file), labels and absent
 * strings; every truncation and a few hostile inputs refused. */
#include "testutil.h"

#include "server/store/spancodec.h"
#include "util.h"

static const char *const labels[] = { "host.name", "g1", "process.pid", "42" };

static void origin(struct store_file *file, struct store_frame_info frames[3], struct gpuspan_in *in)
{
	memset(file, 0, sizeof(*file));
	memset(file->id.b, 0x5a, sizeof(file->id.b));
	file->build_id_len = 3;
	memcpy(file->build_id, "\x01\x02\x03", 3);
	file->nsegs = 2;
	file->segs[0][0] = 0x1000, file->segs[0][1] = 0x401000, file->segs[0][2] = 0x2000;
	file->segs[1][0] = 0x9000, file->segs[1][1] = 0x409000, file->segs[1][2] = 0x100;
	frames[0] = (struct store_frame_info){ .type = 2, .name = "main", .binary = "app" };
	frames[1] = (struct store_frame_info){ .type = 2, .address = 0x1234, .file = file,
					       .file_name = "libtorch.so" };
	frames[2] = (struct store_frame_info){ .type = 12, .address = UINT64_MAX, .name = "k_big" };
	*in = (struct gpuspan_in){ .frames = frames, .nframes = 3, .labels = labels, .nlabels = 2 };
}

static void test_round_trip(void **state)
{
	(void)state;
	struct store_file file;
	struct store_frame_info frames[3];
	struct gpuspan_in in;
	origin(&file, frames, &in);
	struct buf b = { 0 };
	spancodec_encode(&in, &b);
	struct spancodec_origin o;
	spancodec_init(&o);
	assert_int_equal(spancodec_decode(b.data, b.len, &o), 0);
	assert_int_equal(o.nlabels, 2);
	for (size_t i = 0; i < 4; i++)
		assert_string_equal(o.labels[i], labels[i]);
	assert_int_equal(o.nframes, 3);
	assert_string_equal(o.frames[0].name, "main");
	assert_string_equal(o.frames[0].binary, "app");
	assert_null(o.frames[0].file);
	assert_null(o.frames[1].name);
	assert_null(o.frames[1].binary);
	assert_int_equal(o.frames[1].address, 0x1234);
	assert_string_equal(o.frames[1].file_name, "libtorch.so");
	assert_non_null(o.frames[1].file);
	assert_memory_equal(o.frames[1].file->id.b, file.id.b, sizeof(file.id.b));
	assert_int_equal(o.frames[1].file->build_id_len, 3);
	assert_memory_equal(o.frames[1].file->build_id, "\x01\x02\x03", 3);
	assert_int_equal(o.frames[1].file->nsegs, 2);
	assert_memory_equal(o.frames[1].file->segs, file.segs, 2 * 3 * sizeof(uint64_t));
	assert_int_equal(o.frames[2].type, 12);
	assert_true(o.frames[2].address == UINT64_MAX);
	/* filled into a span, encoded again: the same bytes */
	struct gpuspan_in again = { .start_ns = 1 };
	spancodec_fill(&o, &again);
	struct buf b2 = { 0 };
	spancodec_encode(&again, &b2);
	assert_int_equal(b2.len, b.len);
	assert_memory_equal(b2.data, b.data, b.len);
	/* every truncation is refused, and so is a byte more */
	for (size_t n = 0; n < b.len; n++)
		assert_int_equal(spancodec_decode(b.data, n, &o), -1);
	buf_putc(&b, 0);
	assert_int_equal(spancodec_decode(b.data, b.len, &o), -1);
	buf_free(&b);
	buf_free(&b2);
	spancodec_free(&o);
}

static void test_hostile(void **state)
{
	(void)state;
	struct spancodec_origin o;
	spancodec_init(&o);
	/* another version */
	assert_int_equal(spancodec_decode("\x02\x00\x00", 3, &o), -1);
	/* more labels or frames than allowed */
	assert_int_equal(spancodec_decode("\x01\x81\x01", 3, &o), -1);
	assert_int_equal(spancodec_decode("\x01\x00\x81\x20", 4, &o), -1);
	/* a label that is none */
	assert_int_equal(spancodec_decode("\x01\x01\x00\x02x\x00", 6, &o), -1);
	/* a string longer than what is left */
	assert_int_equal(spancodec_decode("\x01\x01\x7fx\x02y\x00", 7, &o), -1);
	/* a file flag of 2, a build id of 65 bytes */
	assert_int_equal(spancodec_decode("\x01\x00\x01\x02\x00\x00\x00\x02", 8, &o), -1);
	char file[64] = "\x01\x00\x01\x02\x00\x00\x00\x01\x00";
	memset(file + 9, 7, 16);
	file[25] = 65;
	assert_int_equal(spancodec_decode(file, 26, &o), -1);
	/* the empty origin: no labels, no frames */
	assert_int_equal(spancodec_decode("\x01\x00\x00", 3, &o), 0);
	assert_int_equal(o.nframes, 0);
	assert_int_equal(o.nlabels, 0);
	spancodec_free(&o);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_round_trip),
	cmocka_unit_test(test_hostile))
