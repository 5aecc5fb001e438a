/* cuda_wire_parse.c - see cuda_wire_parse.h. */
#include "cuda_wire_parse.h"

#include <stddef.h>
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

/* The strings and padding after an entry of entry_size bytes at off:
 * returns the offset after them, or 0 with *why set. */
static size_t check_strings(const uint8_t *p, size_t len, size_t off, size_t entry_size,
			    size_t slen, enum cuda_wire_reject *why)
{
	size_t start = off + entry_size;
	if (slen > len - start) {
		*why = CWR_SHORT;
		return 0;
	}
	if (!printable(p + start, slen)) {
		*why = CWR_STRING;
		return 0;
	}
	size_t end = start + slen, padded = pad8(end);
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

/* A message of one entry of size bytes (HELLO, DEVICE, STATS), copied to
 * m: CWR_OK, or why it is refused. */
static enum cuda_wire_reject one_entry(const struct cuda_wire_hdr *h, const uint8_t *p, size_t len, void *m,
				       size_t size)
{
	size_t body = len - sizeof(*h);
	if (h->count != 1)
		return CWR_COUNT;
	if (body != size)
		return body < size ? CWR_SHORT : CWR_LENGTH;
	memcpy(m, p + sizeof(*h), size);
	return CWR_OK;
}

/* One entry's fixed part (entry_size bytes at e, unaligned): CWR_OK with
 * the length of the strings after it in *slen, or why it is refused. */
typedef enum cuda_wire_reject (*entry_check)(const uint8_t *e, size_t *slen);

/* count entries of entry_size bytes after the header, each followed by its
 * strings and padding, filling the message exactly. */
static enum cuda_wire_reject check_entries(const uint8_t *p, size_t len, uint32_t count, size_t entry_size,
					   entry_check check)
{
	size_t off = sizeof(struct cuda_wire_hdr);
	/* Each entry takes at least its struct and 8 bytes of strings. */
	if (count < 1 || count > (len - off) / (entry_size + 8))
		return CWR_COUNT;
	for (uint32_t i = 0; i < count; i++) {
		if (len - off < entry_size)
			return CWR_SHORT;
		size_t slen = 0;
		enum cuda_wire_reject why = check(p + off, &slen);
		if (why != CWR_OK)
			return why;
		off = check_strings(p, len, off, entry_size, slen, &why);
		if (!off)
			return why;
		if (off == len && i + 1 < count)
			return CWR_COUNT; /* declared more entries than it holds */
	}
	return off == len ? CWR_OK : CWR_LENGTH;
}

/* A PC entry's fields up to name_len are an AGG entry's; its stall_len
 * stands where an AGG entry's reserved field does. */
_Static_assert(offsetof(struct cuda_wire_pc, name_len) == offsetof(struct cuda_wire_agg, name_len) &&
		       offsetof(struct cuda_wire_pc, stall_len) == offsetof(struct cuda_wire_agg, reserved) &&
		       sizeof(struct cuda_wire_pc) >= sizeof(struct cuda_wire_agg),
	       "a PC entry begins as an AGG entry");

/* An AGG entry, or with pc a PC entry (read through its AGG prefix). */
static enum cuda_wire_reject check_counted(const uint8_t *e, size_t *slen, bool pc)
{
	struct cuda_wire_agg a;
	memcpy(&a, e, sizeof(a));
	uint16_t stall_len = pc ? a.reserved : 0;
	if (pc ? a.kind != CUDA_WIRE_KIND_KERNEL && a.kind != CUDA_WIRE_KIND_GRAPH
	       : a.kind < CUDA_WIRE_KIND_KERNEL || a.kind > CUDA_WIRE_KIND_MAX)
		return CWR_KIND;
	if (a.api_len < 1 || a.api_len > CUDA_WIRE_API_MAX || a.name_len < 1 || a.name_len > CUDA_WIRE_NAME_MAX ||
	    (pc && (stall_len < 1 || stall_len > CUDA_WIRE_STALL_MAX)))
		return CWR_STRING;
	if (!pc && a.reserved)
		return CWR_RESERVED;
	if (a.count < 1 || a.count > CUDA_WIRE_MAX_COUNT || a.total_ns > CUDA_WIRE_MAX_TOTAL_NS)
		return CWR_VALUE;
	*slen = (size_t)a.api_len + a.name_len + stall_len;
	return CWR_OK;
}

static enum cuda_wire_reject check_agg(const uint8_t *e, size_t *slen)
{
	return check_counted(e, slen, false);
}

static enum cuda_wire_reject check_pc(const uint8_t *e, size_t *slen)
{
	return check_counted(e, slen, true);
}

static enum cuda_wire_reject check_span(const uint8_t *e, size_t *slen)
{
	struct cuda_wire_span s;
	memcpy(&s, e, sizeof(s));
	if (s.kind < CUDA_WIRE_KIND_KERNEL || s.kind > CUDA_WIRE_KIND_MAX)
		return CWR_KIND;
	if (s.name_len < 1 || s.name_len > CUDA_WIRE_NAME_MAX)
		return CWR_STRING;
	if (s.end_ns < s.start_ns || s.end_ns - s.start_ns > CUDA_WIRE_MAX_TOTAL_NS)
		return CWR_VALUE;
	*slen = s.name_len;
	return CWR_OK;
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
	enum cuda_wire_reject why = CWR_OK;
	switch (h.type) {
	case CUDA_WIRE_HELLO: {
		struct cuda_wire_hello m;
		if ((why = one_entry(&h, p, len, &m, sizeof(m))) != CWR_OK)
			return why;
		if (m.flags)
			return CWR_RESERVED;
		if (!nul_padded(m.lib_version, sizeof(m.lib_version)))
			return CWR_STRING;
		break;
	}
	case CUDA_WIRE_DEVICE: {
		struct cuda_wire_device m;
		if ((why = one_entry(&h, p, len, &m, sizeof(m))) != CWR_OK)
			return why;
		if (m.reserved)
			return CWR_RESERVED;
		if (!nul_padded(m.name, sizeof(m.name)))
			return CWR_STRING;
		break;
	}
	case CUDA_WIRE_STATS: {
		struct cuda_wire_stats m;
		if ((why = one_entry(&h, p, len, &m, sizeof(m))) != CWR_OK)
			return why;
		if (m.reserved)
			return CWR_RESERVED;
		if (m.pc_state > CUDA_WIRE_PC_STATE_MAX)
			return CWR_VALUE;
		break;
	}
	case CUDA_WIRE_PC:
		why = check_entries(p, len, h.count, sizeof(struct cuda_wire_pc), check_pc);
		break;
	case CUDA_WIRE_AGG:
		why = check_entries(p, len, h.count, sizeof(struct cuda_wire_agg), check_agg);
		break;
	case CUDA_WIRE_SPAN:
		why = check_entries(p, len, h.count, sizeof(struct cuda_wire_span), check_span);
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
	out->stall = NULL;
	out->stall_len = 0;
	out->cubin_id = out->pc_offset = 0;
	*off = pad8(*off + sizeof(out->a) + out->a.api_len + out->a.name_len);
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
	out->a.stack_id = w.stack_id;
	out->a.total_ns = w.total_ns;
	out->a.count = w.count;
	out->a.tid = w.tid;
	out->a.kind = w.kind;
	out->a.api_len = w.api_len;
	out->a.device = w.device;
	out->a.stream = w.stream;
	out->a.context = w.context;
	out->a.name_len = w.name_len;
	out->api = (const char *)p + *off + sizeof(w);
	out->name = out->api + w.api_len;
	out->stall = out->name + w.name_len;
	out->stall_len = w.stall_len;
	out->cubin_id = w.cubin_id;
	out->pc_offset = w.pc_offset;
	*off = pad8(*off + sizeof(w) + w.api_len + w.name_len + w.stall_len);
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
