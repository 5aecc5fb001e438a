/* otlp_export.c - see otlp_export.h. */
#include "otlp_export.h"

#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "otlp_profiles.pb-c.h"
#include "util.h"

static const char *const type_names[] = {
	[FT_KERNEL] = "kernel", [FT_NATIVE] = "native", [3] = "cpython", [4] = "go", [5] = "jvm",
	[6] = "v8js", [7] = "ruby", [8] = "php", [9] = "perl", [10] = "dotnet",
	[FT_CUDA_LAUNCH] = "cuda_launch", [FT_CUDA_KERNEL] = "cuda_kernel", [FT_ERROR] = "error",
	[FT_CUDA_MEMCPY] = "cuda_memcpy", [FT_CUDA_MEMSET] = "cuda_memset", [FT_CUDA_SYNC] = "cuda_sync",
	[FT_NVTX] = "nvtx",
};

/* Everything one request points to, freed together. */
struct req {
	char **strings;
	size_t nstrings, capstrings;
	Ember__Otlp__KeyValueAndUnit *attrs;
	Ember__Otlp__KeyValueAndUnit **attrp;
	Ember__Otlp__AnyValue *attr_vals;
	size_t nattrs;
};

static int32_t add_string(struct req *r, const char *s)
{
	xgrow((void **)&r->strings, &r->capstrings, r->nstrings + 1, sizeof(char *));
	r->strings[r->nstrings] = (char *)s;
	return (int32_t)r->nstrings++;
}

int otlp_encode(const struct batch *b, const struct batch_meta *meta, struct buf *out)
{
	struct req r = { 0 };
	size_t ns = strtab_count(&b->strings);
	for (size_t i = 0; i < ns; i++)
		add_string(&r, strtab_get(&b->strings, (uint32_t)i));
	char (*hex)[FILE_ID_HEX_LEN + 1] = xcalloc(b->nfiles + 1, sizeof(*hex));
	char (*gnu)[129] = xcalloc(b->nfiles + 1, sizeof(*gnu));

	/* Attributes: frame types, then two per file (file id, build id). */
	size_t nattr = 1 + ARRAY_SIZE(type_names) + 2 * b->nfiles;
	r.attrs = xcalloc(nattr, sizeof(*r.attrs));
	r.attrp = xcalloc(nattr, sizeof(*r.attrp));
	r.attr_vals = xcalloc(nattr, sizeof(*r.attr_vals));
	for (size_t i = 0; i < nattr; i++) {
		ember__otlp__key_value_and_unit__init(&r.attrs[i]);
		ember__otlp__any_value__init(&r.attr_vals[i]);
		r.attrp[i] = &r.attrs[i];
	}
	r.nattrs = 1;
	int32_t type_attr[ARRAY_SIZE(type_names)] = { 0 };
	int32_t k_type = add_string(&r, "profile.frame.type");
	for (size_t t = 0; t < ARRAY_SIZE(type_names); t++) {
		if (!type_names[t])
			continue;
		Ember__Otlp__KeyValueAndUnit *a = &r.attrs[r.nattrs];
		a->key_strindex = k_type;
		a->value = &r.attr_vals[r.nattrs];
		a->value->value_case = EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE_STRINDEX;
		a->value->string_value_strindex = add_string(&r, type_names[t]);
		type_attr[t] = (int32_t)r.nattrs++;
	}

	/* Mappings: one per file; index 0 is the zero mapping. */
	Ember__Otlp__Mapping *maps = xcalloc(b->nfiles + 1, sizeof(*maps));
	Ember__Otlp__Mapping **mapp = xcalloc(b->nfiles + 1, sizeof(*mapp));
	int32_t *map_attrs = xcalloc(2 * b->nfiles + 1, sizeof(int32_t));
	int32_t k_htl = add_string(&r, "process.executable.build_id.htlhash");
	int32_t k_gnu = add_string(&r, "process.executable.build_id.gnu");
	for (size_t i = 0; i <= b->nfiles; i++) {
		ember__otlp__mapping__init(&maps[i]);
		mapp[i] = &maps[i];
		if (i == 0)
			continue;
		const struct bfile *f = &b->files[i - 1];
		maps[i].filename_strindex = (int32_t)f->name;
		maps[i].memory_limit = UINT64_MAX; /* addresses are file offsets */
		fileid_hex(&f->id, hex[i]);
		Ember__Otlp__KeyValueAndUnit *a = &r.attrs[r.nattrs];
		a->key_strindex = k_htl;
		a->value = &r.attr_vals[r.nattrs];
		a->value->value_case = EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
		a->value->string_value = hex[i];
		maps[i].attribute_indices = &map_attrs[2 * (i - 1)];
		maps[i].attribute_indices[maps[i].n_attribute_indices++] = (int32_t)r.nattrs++;
		if (f->build_id_len) {
			hex_encode(f->build_id, f->build_id_len, gnu[i]);
			a = &r.attrs[r.nattrs];
			a->key_strindex = k_gnu;
			a->value = &r.attr_vals[r.nattrs];
			a->value->value_case = EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
			a->value->string_value = gnu[i];
			maps[i].attribute_indices[maps[i].n_attribute_indices++] = (int32_t)r.nattrs++;
		}
	}

	/* Locations and functions: one each per frame (index 0: zero). */
	size_t nf = b->nframes + 1;
	Ember__Otlp__Location *locs = xcalloc(nf, sizeof(*locs));
	Ember__Otlp__Location **locp = xcalloc(nf, sizeof(*locp));
	Ember__Otlp__Function *funs = xcalloc(nf, sizeof(*funs));
	Ember__Otlp__Function **funp = xcalloc(nf, sizeof(*funp));
	Ember__Otlp__Line *lines = xcalloc(nf, sizeof(*lines));
	Ember__Otlp__Line **linep = xcalloc(nf, sizeof(*linep));
	int32_t *loc_attr = xcalloc(nf, sizeof(int32_t));
	size_t nfun = 1;
	ember__otlp__function__init(&funs[0]);
	funp[0] = &funs[0];
	for (size_t i = 0; i < nf; i++) {
		ember__otlp__location__init(&locs[i]);
		locp[i] = &locs[i];
		if (i == 0)
			continue;
		const struct bframe *f = &b->frames[i - 1];
		Ember__Otlp__Location *l = &locs[i];
		loc_attr[i] = f->type < ARRAY_SIZE(type_names) && type_attr[f->type]
				      ? type_attr[f->type] : type_attr[FT_NATIVE];
		l->n_attribute_indices = 1;
		l->attribute_indices = &loc_attr[i];
		if (f->name) {
			ember__otlp__function__init(&funs[nfun]);
			funs[nfun].name_strindex = (int32_t)f->name;
			funs[nfun].filename_strindex = (int32_t)f->binary;
			funp[nfun] = &funs[nfun];
			ember__otlp__line__init(&lines[i]);
			lines[i].function_index = (int32_t)nfun++;
			if (f->type == FT_CPYTHON) /* the source file and line */
				lines[i].line = (int64_t)f->address;
			linep[i] = &lines[i];
			l->n_lines = 1;
			l->lines = &linep[i];
		} else {
			l->mapping_index = (int32_t)f->file;
			l->address = f->address;
		}
	}

	/* Stacks: leaf first. */
	size_t nst = b->nstacks + 1;
	Ember__Otlp__Stack *stacks = xcalloc(nst, sizeof(*stacks));
	Ember__Otlp__Stack **stackp = xcalloc(nst, sizeof(*stackp));
	int32_t *locidx = xcalloc(b->nstack_ids + 1, sizeof(int32_t));
	for (size_t i = 0; i < nst; i++) {
		ember__otlp__stack__init(&stacks[i]);
		stackp[i] = &stacks[i];
		if (i == 0)
			continue;
		uint32_t o = b->stack_off[i - 1], e = b->stack_off[i];
		stacks[i].location_indices = locidx + o;
		stacks[i].n_location_indices = e - o;
		for (uint32_t j = o; j < e; j++)
			locidx[o + (e - 1 - j)] = (int32_t)b->stack_ids[j] + 1;
	}

	/* One ResourceProfiles per process: the resource's attributes but
	 * thread.name, which becomes a sample attribute. */
	uint32_t thread_key = strtab_lookup(&b->strings, "thread.name", 11);
	size_t nres = b->nres, ngroups = 0;
	uint32_t *group_of = xcalloc(nres + 1, sizeof(uint32_t));
	uint32_t *group_res = xcalloc(nres + 1, sizeof(uint32_t)); /* a resource of the group */
	int32_t *thread_attr = xcalloc(nres + 1, sizeof(int32_t));
	int32_t *attr_of_str = xcalloc(ns + 1, sizeof(int32_t));
	r.attrs = xrealloc(r.attrs, (r.nattrs + nres + 1) * sizeof(*r.attrs));
	r.attrp = xrealloc(r.attrp, (r.nattrs + nres + 1) * sizeof(*r.attrp));
	r.attr_vals = xrealloc(r.attr_vals, (r.nattrs + nres + 1) * sizeof(*r.attr_vals));
	for (size_t i = 0; i < r.nattrs; i++) { /* the arrays moved */
		r.attrp[i] = &r.attrs[i];
		if (r.attrs[i].value)
			r.attrs[i].value = &r.attr_vals[i];
	}
	for (size_t i = 0; i < nres; i++) {
		uint32_t o = b->res_off[i], e = b->res_off[i + 1];
		for (uint32_t j = o; j + 1 < e; j += 2)
			if (b->res_ids[j] == thread_key) {
				uint32_t v = b->res_ids[j + 1];
				if (!attr_of_str[v]) {
					Ember__Otlp__KeyValueAndUnit *a = &r.attrs[r.nattrs];
					ember__otlp__key_value_and_unit__init(a);
					ember__otlp__any_value__init(&r.attr_vals[r.nattrs]);
					a->key_strindex = (int32_t)thread_key;
					a->value = &r.attr_vals[r.nattrs];
					a->value->value_case = EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE_STRINDEX;
					a->value->string_value_strindex = (int32_t)v;
					r.attrp[r.nattrs] = a;
					attr_of_str[v] = (int32_t)r.nattrs++;
				}
				thread_attr[i] = attr_of_str[v];
			}
		/* The group: the first resource with the same other attributes. */
		size_t g;
		for (g = 0; g < ngroups; g++) {
			uint32_t q = group_res[g], qo = b->res_off[q], qe = b->res_off[q + 1];
			uint32_t a = o, c = qo;
			for (;;) {
				while (a + 1 < e && b->res_ids[a] == thread_key)
					a += 2;
				while (c + 1 < qe && b->res_ids[c] == thread_key)
					c += 2;
				if (a + 1 >= e || c + 1 >= qe)
					break;
				if (b->res_ids[a] != b->res_ids[c] || b->res_ids[a + 1] != b->res_ids[c + 1])
					break;
				a += 2;
				c += 2;
			}
			if (a + 1 >= e && c + 1 >= qe)
				break;
		}
		if (g == ngroups)
			group_res[ngroups++] = (uint32_t)i;
		group_of[i] = (uint32_t)g;
	}
	/* Within a process, one Profile per event kind present (each has one
	 * sample type): on-CPU samples/count, off-CPU off_cpu/nanoseconds,
	 * GPU time cuda/nanoseconds. */
	enum { NKINDS = 3 }; /* slot 0: EK_ON_CPU, 1: EK_OFF_CPU, 2: EK_CUDA */
#define KIND_SLOT(k) ((k) == EK_OFF_CPU ? 1 : (k) == EK_CUDA ? 2 : 0)
	size_t *per_prof = xcalloc(ngroups * NKINDS + 1, sizeof(size_t));
	for (size_t i = 0; i < b->nsamples; i++)
		per_prof[group_of[b->samples[i].resource] * NKINDS + KIND_SLOT(b->samples[i].kind)]++;
	size_t nprofs = 0;
	for (size_t i = 0; i < ngroups * NKINDS; i++)
		nprofs += per_prof[i] > 0;
	Ember__Otlp__ResourceProfiles *rps = xcalloc(ngroups + 1, sizeof(*rps));
	Ember__Otlp__ResourceProfiles **rpp = xcalloc(ngroups + 1, sizeof(*rpp));
	Ember__Otlp__Resource *res = xcalloc(ngroups + 1, sizeof(*res));
	Ember__Otlp__ScopeProfiles *sps = xcalloc(ngroups + 1, sizeof(*sps));
	Ember__Otlp__ScopeProfiles **spp = xcalloc(ngroups + 1, sizeof(*spp));
	Ember__Otlp__Profile *profs = xcalloc(nprofs + 1, sizeof(*profs));
	Ember__Otlp__Profile **profp = xcalloc(nprofs + 1, sizeof(*profp));
	size_t *prof_of = xcalloc(ngroups * NKINDS + 1, sizeof(size_t)); /* (group, kind) -> profile */
	Ember__Otlp__ValueType vt_sample[NKINDS], vt_period[NKINDS];
	for (size_t k = 0; k < NKINDS; k++) {
		ember__otlp__value_type__init(&vt_sample[k]);
		ember__otlp__value_type__init(&vt_period[k]);
	}
	vt_sample[0].type_strindex = add_string(&r, "samples");
	vt_sample[0].unit_strindex = add_string(&r, "count");
	vt_period[0].type_strindex = add_string(&r, "cpu");
	vt_period[0].unit_strindex = add_string(&r, "nanoseconds");
	vt_sample[1].type_strindex = add_string(&r, "off_cpu");
	vt_sample[1].unit_strindex = add_string(&r, "nanoseconds");
	vt_period[1] = vt_period[0];
	vt_sample[2].type_strindex = add_string(&r, "cuda");
	vt_sample[2].unit_strindex = vt_sample[1].unit_strindex;
	vt_period[2] = vt_period[0];
	size_t nkv = b->nres_ids / 2 + 1;
	Ember__Otlp__KeyValue *kvs = xcalloc(nkv, sizeof(*kvs));
	Ember__Otlp__KeyValue **kvp = xcalloc(nkv, sizeof(*kvp));
	Ember__Otlp__AnyValue *kvv = xcalloc(nkv, sizeof(*kvv));
	Ember__Otlp__Sample *samples = xcalloc(b->nsamples + 1, sizeof(*samples));
	Ember__Otlp__Sample **samplep = xcalloc(b->nsamples + 1, sizeof(*samplep));
	int64_t *values = xcalloc(b->nsamples + 1, sizeof(int64_t));
	size_t *fill = xcalloc(nprofs + 1, sizeof(size_t));
	size_t kvn = 0, so = 0, np = 0;
	for (size_t g = 0; g < ngroups; g++) {
		ember__otlp__resource_profiles__init(&rps[g]);
		ember__otlp__resource__init(&res[g]);
		ember__otlp__scope_profiles__init(&sps[g]);
		rpp[g] = &rps[g];
		spp[g] = &sps[g];
		rps[g].resource = &res[g];
		rps[g].n_scope_profiles = 1;
		rps[g].scope_profiles = &spp[g];
		sps[g].profiles = profp + np;
		uint32_t i = group_res[g], o = b->res_off[i], e = b->res_off[i + 1];
		res[g].attributes = kvp + kvn;
		for (uint32_t j = o; j + 1 < e; j += 2) {
			if (b->res_ids[j] == thread_key)
				continue;
			Ember__Otlp__KeyValue *kv = &kvs[kvn];
			ember__otlp__key_value__init(kv);
			ember__otlp__any_value__init(&kvv[kvn]);
			kv->key = (char *)strtab_get(&b->strings, b->res_ids[j]);
			kvv[kvn].value_case = EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
			kvv[kvn].string_value = (char *)strtab_get(&b->strings, b->res_ids[j + 1]);
			kv->value = &kvv[kvn];
			kvp[kvn++] = kv;
			res[g].n_attributes++;
		}
		for (size_t k = 0; k < NKINDS; k++) {
			if (!per_prof[g * NKINDS + k])
				continue;
			Ember__Otlp__Profile *p = &profs[np];
			ember__otlp__profile__init(p);
			profp[np] = p;
			sps[g].n_profiles++;
			p->sample_type = &vt_sample[k];
			p->period_type = &vt_period[k];
			p->period = meta->sample_rate_hz ? 1000000000LL / meta->sample_rate_hz : 0;
			p->time_unix_nano = (uint64_t)meta->start_unix_ms * 1000000ull;
			p->duration_nano = (uint64_t)(meta->end_unix_ms - meta->start_unix_ms) * 1000000ull;
			p->samples = samplep + so;
			fill[np] = so;
			prof_of[g * NKINDS + k] = np++;
			so += per_prof[g * NKINDS + k];
		}
	}
	for (size_t i = 0; i < b->nsamples; i++) {
		const struct bsample *s = &b->samples[i];
		size_t pi = prof_of[group_of[s->resource] * NKINDS + KIND_SLOT(s->kind)];
		size_t at = fill[pi]++;
		Ember__Otlp__Sample *o = &samples[at];
		ember__otlp__sample__init(o);
		o->stack_index = (int32_t)s->stack + 1;
		values[at] = (int64_t)s->value;
		o->n_values = 1;
		o->values = &values[at];
		if (thread_attr[s->resource]) {
			o->n_attribute_indices = 1;
			o->attribute_indices = &thread_attr[s->resource];
		}
		samplep[at] = o;
		profs[pi].n_samples++;
	}

	Ember__Otlp__ProfilesDictionary dict = EMBER__OTLP__PROFILES_DICTIONARY__INIT;
	dict.n_string_table = r.nstrings;
	dict.string_table = r.strings;
	dict.n_mapping_table = b->nfiles + 1;
	dict.mapping_table = mapp;
	dict.n_location_table = nf;
	dict.location_table = locp;
	dict.n_function_table = nfun;
	dict.function_table = funp;
	dict.n_attribute_table = r.nattrs;
	dict.attribute_table = r.attrp;
	dict.n_stack_table = nst;
	dict.stack_table = stackp;
	Ember__Otlp__ExportProfilesServiceRequest msg = EMBER__OTLP__EXPORT_PROFILES_SERVICE_REQUEST__INIT;
	msg.dictionary = &dict;
	msg.n_resource_profiles = ngroups;
	msg.resource_profiles = rpp;

	size_t len = ember__otlp__export_profiles_service_request__get_packed_size(&msg);
	uint8_t *raw = xmalloc(len + 1);
	ember__otlp__export_profiles_service_request__pack(&msg, raw);
	int rc = gzip_compress_buf(raw, len, 6, out);
	free(raw);

	free(r.strings);
	free(r.attrs);
	free(r.attrp);
	free(r.attr_vals);
	free(hex);
	free(gnu);
	free(maps);
	free(mapp);
	free(map_attrs);
	free(locs);
	free(locp);
	free(funs);
	free(funp);
	free(lines);
	free(linep);
	free(loc_attr);
	free(stacks);
	free(stackp);
	free(locidx);
	free(rps);
	free(rpp);
	free(res);
	free(sps);
	free(spp);
	free(profs);
	free(profp);
	free(kvs);
	free(kvp);
	free(kvv);
	free(per_prof);
	free(prof_of);
	free(group_of);
	free(group_res);
	free(thread_attr);
	free(attr_of_str);
	free(samples);
	free(samplep);
	free(values);
	free(fill);
	return rc;
}
