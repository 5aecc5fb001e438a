/* cuda_wire_parse.c - see cuda_wire_parse.h. */
#include "cuda_wire_parse.h"

#include <string.h>

static const char *const reject_names[CWR_MAX] = {
	[CWR_OK] = "ok",
	[CWR_SHORT] = "short",
	[CWR_OVERSIZE] = "oversize",
	[CWR_MAGIC] = "magic",
	[CWR_VERSION] = "version",
	[CWR_TYPE] = "type",
	[CWR_LENGTH] = "length",
	[CWR_COUNT] = "count",
	[CWR_KIND] = "kind",
	[CWR_STRING] = "string",
	[CWR_RESERVED] = "reserved",
	[CWR_VALUE] = "value",
	[CWR_ORDER] = "order",
	[CWR_RATE] = "rate",
	[CWR_NVTX] = "nvtx",
};

const char *cuda_wire_reject_name(enum cuda_wire_reject r)
{
	return (unsigned)r < CWR_MAX ? reject_names[r] : "unknown";
}

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

static bool printable(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

static bool all_zero(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i])
			return false;
	return true;
}

/* A NUL-padded fixed string: printable bytes, then at least one NUL, then
 * only NULs. */
static bool nul_padded(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);
	return n < cap && printable((const uint8_t *)s, n) && all_zero((const uint8_t *)s + n, cap - n);
}

/* An NVTX path (lib/cuda_wire.h): 1..CUDA_WIRE_NVTX_DEPTH_MAX ranges, each
 * a length 1..CUDA_WIRE_NVTX_NAME_MAX and that many printable bytes,
 * filling exactly n bytes. */
static bool nvtx_path_ok(const uint8_t *s, size_t n)
{
	size_t off = 0;
	unsigned depth = 0;
	while (off < n) {
		size_t l = s[off];
		if (l < 1 || l > CUDA_WIRE_NVTX_NAME_MAX || l > n - off - 1 || ++depth > CUDA_WIRE_NVTX_DEPTH_MAX ||
		    !printable(s + off + 1, l))
			return false;
		off += 1 + l;
	}
	return depth > 0;
}

bool cuda_wire_nvtx_next(const char *path, size_t len, size_t *off, const char **name, size_t *name_len)
{
	if (!path || *off >= len)
		return false;
	size_t l = (uint8_t)path[*off];
	*name = path + *off + 1;
	*name_len = l;
	*off += 1 + l;
	return true;
}

/* The strings (slen bytes, printable), `extra` bytes checked by the caller,
 * and padding after an entry of entry_size bytes at off:
 * returns the offset after them, or 0 with *why set. */
static size_t check_strings(const uint8_t *p, size_t len, size_t off, size_t entry_size,
			    size_t slen, size_t extra, enum cuda_wire_reject *why)
{
	size_t start = off + entry_size;
	if (slen + extra > len - start) {
		*why = CWR_SHORT;
		return 0;
	}
	if (!printable(p + start, slen)) {
		*why = CWR_STRING;
		return 0;
	}
	size_t end = start + slen + extra, padded = pad8(end);
	if (padded > len) {
		*why = CWR_SHORT;
		return 0;
	}
	if (!all_zero(p + end, padded - end)) {
		*why = CWR_RESERVED;
		return 0;
	}
	return padded;
}

/* The launch an AGG, SPAN or PC entry of entry_size bytes at off names:
 * its API, name, `more` further printable bytes (a PC entry's stall
 * reason, bounded by the caller; 0 for the others) and NVTX path
 * (lib/cuda_wire.h), then padding. Returns the offset after them, or 0
 * with *why set. */
static size_t check_launch(const uint8_t *p, size_t len, size_t off, size_t entry_size, uint16_t api_len,
			   uint16_t name_len, size_t more, uint16_t nvtx_len, enum cuda_wire_reject *why)
{
	if (api_len < 1 || api_len > CUDA_WIRE_API_MAX || name_len < 1 || name_len > CUDA_WIRE_NAME_MAX) {
		*why = CWR_STRING;
		return 0;
	}
	if (nvtx_len > CUDA_WIRE_NVTX_BYTES_MAX) {
		*why = CWR_NVTX;
		return 0;
	}
	size_t strings = (size_t)api_len + name_len + more, path = off + entry_size + strings;
	if (nvtx_len && (path + nvtx_len > len || !nvtx_path_ok(p + path, nvtx_len))) {
		*why = path + nvtx_len > len ? CWR_SHORT : CWR_NVTX;
		return 0;
	}
	return check_strings(p, len, off, entry_size, strings, nvtx_len, why);
}

static enum cuda_wire_reject check_agg(const uint8_t *p, size_t len, uint32_t count)
{
	size_t off = sizeof(struct cuda_wire_hdr);
	for (uint32_t i = 0; i < count; i++) {
		struct cuda_wire_agg a;
		if (len - off < sizeof(a))
			return CWR_SHORT;
		memcpy(&a, p + off, sizeof(a));
		if (a.kind < CUDA_WIRE_KIND_KERNEL || a.kind > CUDA_WIRE_KIND_MAX)
			return CWR_KIND;
		if (a.count < 1 || a.count > CUDA_WIRE_MAX_COUNT || a.total_ns > CUDA_WIRE_MAX_TOTAL_NS)
			return CWR_VALUE;
		enum cuda_wire_reject why = CWR_OK;
		off = check_launch(p, len, off, sizeof(a), a.api_len, a.name_len, 0, a.nvtx_len, &why);
		if (!off)
			return why;
		if (off == len && i + 1 < count)
			return CWR_COUNT; /* declared more entries than it holds */
	}
	return off == len ? CWR_OK : CWR_LENGTH;
}

static enum cuda_wire_reject check_pc(const uint8_t *p, size_t len, uint32_t count)
{
	size_t off = sizeof(struct cuda_wire_hdr);
	for (uint32_t i = 0; i < count; i++) {
		struct cuda_wire_pc a;
		if (len - off < sizeof(a))
			return CWR_SHORT;
		memcpy(&a, p + off, sizeof(a));
		if (a.kind != CUDA_WIRE_KIND_KERNEL && a.kind != CUDA_WIRE_KIND_GRAPH)
			return CWR_KIND;
		if (a.stall_len < 1 || a.stall_len > CUDA_WIRE_STALL_MAX)
			return CWR_STRING;
		if (a.reserved16 || a.reserved)
			return CWR_RESERVED;
		if (a.count < 1 || a.count > CUDA_WIRE_MAX_COUNT || a.total_ns > CUDA_WIRE_MAX_TOTAL_NS)
			return CWR_VALUE;
		enum cuda_wire_reject why = CWR_OK;
		off = check_launch(p, len, off, sizeof(a), a.api_len, a.name_len, a.stall_len, a.nvtx_len, &why);
		if (!off)
			return why;
		if (off == len && i + 1 < count)
			return CWR_COUNT;
	}
	return off == len ? CWR_OK : CWR_LENGTH;
}

static enum cuda_wire_reject check_span(const uint8_t *p, size_t len, uint32_t count)
{
	size_t off = sizeof(struct cuda_wire_hdr);
	for (uint32_t i = 0; i < count; i++) {
		struct cuda_wire_span s;
		if (len - off < sizeof(s))
			return CWR_SHORT;
		memcpy(&s, p + off, sizeof(s));
		if (s.kind < CUDA_WIRE_KIND_KERNEL || s.kind > CUDA_WIRE_KIND_MAX)
			return CWR_KIND;
		if (s.end_ns < s.start_ns || s.end_ns - s.start_ns > CUDA_WIRE_MAX_TOTAL_NS)
			return CWR_VALUE;
		enum cuda_wire_reject why = CWR_OK;
		off = check_launch(p, len, off, sizeof(s), s.api_len, s.name_len, 0, s.nvtx_len, &why);
		if (!off)
			return why;
		if (off == len && i + 1 < count)
			return CWR_COUNT;
	}
	return off == len ? CWR_OK : CWR_LENGTH;
}

enum cuda_wire_reject cuda_wire_check(const void *data, size_t len, uint16_t *type, uint32_t *count)
{
	const uint8_t *p = data;
	struct cuda_wire_hdr h;
	if (len > CUDA_WIRE_MAX_MSG)
		return CWR_OVERSIZE;
	if (len < sizeof(h))
		return CWR_SHORT;
	memcpy(&h, p, sizeof(h));
	if (h.magic != CUDA_WIRE_MAGIC)
		return CWR_MAGIC;
	if (h.version != CUDA_WIRE_VERSION)
		return CWR_VERSION;
	if (h.type < CUDA_WIRE_HELLO || h.type > CUDA_WIRE_TYPE_MAX)
		return CWR_TYPE;
	if (h.length != len)
		return CWR_LENGTH;
	size_t body = len - sizeof(h);
	enum cuda_wire_reject why = CWR_OK;
	switch (h.type) {
	case CUDA_WIRE_HELLO: {
		struct cuda_wire_hello m;
		if (h.count != 1)
			return CWR_COUNT;
		if (body != sizeof(m))
			return body < sizeof(m) ? CWR_SHORT : CWR_LENGTH;
		memcpy(&m, p + sizeof(h), sizeof(m));
		if (m.flags)
			return CWR_RESERVED;
		if (!nul_padded(m.lib_version, sizeof(m.lib_version)))
			return CWR_STRING;
		break;
	}
	case CUDA_WIRE_DEVICE: {
		struct cuda_wire_device m;
		if (h.count != 1)
			return CWR_COUNT;
		if (body != sizeof(m))
			return body < sizeof(m) ? CWR_SHORT : CWR_LENGTH;
		memcpy(&m, p + sizeof(h), sizeof(m));
		if (m.reserved)
			return CWR_RESERVED;
		if (!nul_padded(m.name, sizeof(m.name)))
			return CWR_STRING;
		break;
	}
	case CUDA_WIRE_STATS: {
		struct cuda_wire_stats m;
		if (h.count != 1)
			return CWR_COUNT;
		if (body != sizeof(m))
			return body < sizeof(m) ? CWR_SHORT : CWR_LENGTH;
		memcpy(&m, p + sizeof(h), sizeof(m));
		if (m.reserved)
			return CWR_RESERVED;
		if (m.pc_state > CUDA_WIRE_PC_STATE_MAX)
			return CWR_VALUE;
		break;
	}
	case CUDA_WIRE_PC:
		if (h.count < 1 || h.count > body / (sizeof(struct cuda_wire_pc) + 8))
			return CWR_COUNT;
		why = check_pc(p, len, h.count);
		break;
	case CUDA_WIRE_AGG:
		/* Each entry takes at least its struct and 8 bytes of strings. */
		if (h.count < 1 || h.count > body / (sizeof(struct cuda_wire_agg) + 8))
			return CWR_COUNT;
		why = check_agg(p, len, h.count);
		break;
	case CUDA_WIRE_SPAN:
		if (h.count < 1 || h.count > body / (sizeof(struct cuda_wire_span) + 8))
			return CWR_COUNT;
		why = check_span(p, len, h.count);
		break;
	}
	if (why == CWR_OK) {
		*type = h.type;
		*count = h.count;
	}
	return why;
}

bool cuda_wire_next_agg(const void *msg, size_t len, size_t *off, struct cuda_agg_view *out)
{
	const uint8_t *p = msg;
	if (*off == 0)
		*off = sizeof(struct cuda_wire_hdr);
	if (*off + sizeof(out->a) > len)
		return false;
	memcpy(&out->a, p + *off, sizeof(out->a));
	out->api = (const char *)p + *off + sizeof(out->a);
	out->name = out->api + out->a.api_len;
	out->nvtx = out->a.nvtx_len ? out->name + out->a.name_len : NULL;
	out->stall = NULL;
	out->stall_len = 0;
	out->cubin_id = out->pc_offset = 0;
	out->span = false;
	out->start_ns = out->end_ns = 0;
	*off = pad8(*off + sizeof(out->a) + out->a.api_len + out->a.name_len + out->a.nvtx_len);
	return true;
}

/* The launch fields a PC or SPAN entry w shares with an AGG entry (they
 * have the same names), into out->a. */
#define LAUNCH_VIEW(out, w)                    \
	do {                                   \
		(out)->a.stack_id = (w).stack_id; \
		(out)->a.tid = (w).tid;           \
		(out)->a.kind = (w).kind;         \
		(out)->a.api_len = (w).api_len;   \
		(out)->a.device = (w).device;     \
		(out)->a.stream = (w).stream;     \
		(out)->a.context = (w).context;   \
		(out)->a.name_len = (w).name_len; \
	} while (0)

bool cuda_wire_next_span(const void *msg, size_t len, size_t *off, struct cuda_agg_view *out)
{
	const uint8_t *p = msg;
	struct cuda_wire_span w;
	if (*off == 0)
		*off = sizeof(struct cuda_wire_hdr);
	if (*off + sizeof(w) > len)
		return false;
	memcpy(&w, p + *off, sizeof(w));
	memset(out, 0, sizeof(*out));
	LAUNCH_VIEW(out, w);
	out->a.total_ns = w.end_ns - w.start_ns;
	out->a.count = 1;
	out->a.nvtx_len = w.nvtx_len;
	out->api = (const char *)p + *off + sizeof(w);
	out->name = out->api + w.api_len;
	out->nvtx = w.nvtx_len ? out->name + w.name_len : NULL;
	out->span = true;
	out->start_ns = w.start_ns;
	out->end_ns = w.end_ns;
	*off = pad8(*off + sizeof(w) + w.api_len + w.name_len + w.nvtx_len);
	return true;
}

bool cuda_wire_next_pc(const void *msg, size_t len, size_t *off, struct cuda_agg_view *out)
{
	const uint8_t *p = msg;
	struct cuda_wire_pc w;
	if (*off == 0)
		*off = sizeof(struct cuda_wire_hdr);
	if (*off + sizeof(w) > len)
		return false;
	memcpy(&w, p + *off, sizeof(w));
	memset(&out->a, 0, sizeof(out->a));
	LAUNCH_VIEW(out, w);
	out->a.total_ns = w.total_ns;
	out->a.count = w.count;
	out->api = (const char *)p + *off + sizeof(w);
	out->name = out->api + w.api_len;
	out->stall = out->name + w.name_len;
	out->stall_len = w.stall_len;
	out->a.nvtx_len = w.nvtx_len;
	out->nvtx = w.nvtx_len ? out->stall + w.stall_len : NULL;
	out->cubin_id = w.cubin_id;
	out->pc_offset = w.pc_offset;
	out->span = false;
	out->start_ns = out->end_ns = 0;
	*off = pad8(*off + sizeof(w) + w.api_len + w.name_len + w.stall_len + w.nvtx_len);
	return true;
}

void cuda_wire_hello(const void *msg, struct cuda_wire_hello *out)
{
	memcpy(out, (const uint8_t *)msg + sizeof(struct cuda_wire_hdr), sizeof(*out));
}

void cuda_wire_device(const void *msg, struct cuda_wire_device *out)
{
	memcpy(out, (const uint8_t *)msg + sizeof(struct cuda_wire_hdr), sizeof(*out));
}

void cuda_wire_stats(const void *msg, struct cuda_wire_stats *out)
{
	memcpy(out, (const uint8_t *)msg + sizeof(struct cuda_wire_hdr), sizeof(*out));
}
