# ember - build, run and test. Everything is built out of tree in build/.
#
#   make            build the binaries (build/bin/ember-agent, ember-server, ember)
#   make run        install what building and running need, build, start server + agent (Ctrl-C stops)
#   make test       install what the tests need too; every test: unit (ASan+UBSan), fuzz smoke, integration, browser
#   make bench      the benchmarks under bench/
#   make clean

BUILD   ?= build
CC      ?= gcc
CLANG   ?= clang
BPFTOOL ?= bpftool
# The release -version prints, and the source it was built from.
VERSION ?= 0.1.0
SOURCE  := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
ARCH    := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')

PKGS := libbpf libelf libdw zlib libzstd libmicrohttpd jansson libcurl sqlite3 \
        libprotobuf-c libpcre2-8 libcrypto libxxhash libdebuginfod libsodium libnghttp2 gnutls \
        libpq
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

# V=1 shows every command.
V       ?= 0
ifeq ($(V),0)
Q       := @
say      = @printf '  %-7s %s\n' $(1) $(2);
else
Q       :=
say      =
endif

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-missing-field-initializers
CFLAGS  ?= -O2 -g
ALL_CFLAGS := -std=gnu11 $(WARN) $(CFLAGS) -D_GNU_SOURCE -I. -Ilib -I$(BUILD)/gen -I$(BUILD)/bpf -Ibpf \
              $(PKG_CFLAGS) -MMD -MP
LDLIBS  := $(PKG_LIBS) -liberty -lpthread -lm
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
# Test builds fail loudly on a misuse of the JSON writer (lib/jsonw.h).
STRICT  := -DEMBER_JSONW_STRICT

LIB_SRCS    := $(wildcard lib/*.c)
AGENT_SRCS  := $(filter-out agent/main.c,$(wildcard agent/*.c))
SERVER_SRCS := $(filter-out server/main.c,$(wildcard server/*/*.c server/store/clickhouse/*.c))
CLI_SRCS    := $(filter-out cli/main.c,$(wildcard cli/*.c))
# The BPF programs, one file a feature, linked into one object with one
# skeleton (bpf/maps.bpf.h says how they share maps).
BPF_SRCS    := $(wildcard bpf/*.bpf.c)
BPF_OBJS    := $(patsubst bpf/%.bpf.c,$(BUILD)/bpf/%.bpf.o,$(BPF_SRCS))
SKELS       := $(BUILD)/bpf/ember.skel.h
GEN_SRCS    := $(BUILD)/gen/ingest.pb-c.c $(BUILD)/gen/otlp_profiles.pb-c.c $(BUILD)/gen/containerd.pb-c.c $(BUILD)/gen/pprof_profile.pb-c.c
ASSET_SRC   := $(BUILD)/gen/assets.c
WEB_FILES   := $(sort $(wildcard web/*.html web/*.js web/*.css web/*.svg)) server/http/openapi.json

obj  = $(patsubst %.c,$(BUILD)/obj/%.o,$(patsubst $(BUILD)/%,%,$(1)))
aobj = $(patsubst %.c,$(BUILD)/asan/%.o,$(patsubst $(BUILD)/%,%,$(1)))

LIB_OBJS    := $(call obj,$(LIB_SRCS) $(GEN_SRCS))
AGENT_OBJS  := $(call obj,$(AGENT_SRCS))
SERVER_OBJS := $(call obj,$(SERVER_SRCS) $(ASSET_SRC))
CLI_OBJS    := $(call obj,$(CLI_SRCS))
# `ember identity` opens the server's identity store itself (cli/identity_cmd.c).
CLI_SERVER_OBJS := $(call obj,server/auth/identity.c server/auth/b64url.c server/auth/perm.c server/auth/password.c)

BINS := $(BUILD)/bin/ember-agent $(BUILD)/bin/ember-server $(BUILD)/bin/ember

# Unit tests live beside the module they test (tests/unit/<folder>/test_*.c);
# each builds to build/tests/test_* (names are unique across folders).
UNIT_SRCS := $(wildcard tests/unit/*/test_*.c)
UNIT_BINS := $(addprefix $(BUILD)/tests/,$(basename $(notdir $(UNIT_SRCS))))
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
WORKLOADS := $(addprefix $(BUILD)/workloads/,cpu_split offcpu_split offcpu_burst unwind_c unwind_lib unwind_cpp unwind_rust \
               unwind_go unwind_go_stripped symbols_cpp symbols_cpp.stripped metrics_load \
               cuda_wire/libembercuda.so cuda_wire_launcher recs_regex recs_zlib recs_lock recs_write)

.PHONY: FORCE all deps deps-run run test unit fuzz integration browser bench clean
.DELETE_ON_ERROR:
.SECONDARY:

all: $(BINS)

# What building and running need (make run), and that plus what only the
# tests and benchmarks need (make test, make bench): scripts/install-deps.sh.
deps-run:
	@scripts/install-deps.sh run

deps:
	@scripts/install-deps.sh test

# --- generated sources -------------------------------------------------

$(BUILD)/vmlinux.h:
	@mkdir -p $(@D)
	@test -r /sys/kernel/btf/vmlinux || { echo "this kernel has no BTF (/sys/kernel/btf/vmlinux): ember needs Linux >= 5.10 built with CONFIG_DEBUG_INFO_BTF" >&2; exit 1; }
	$(call say,GEN,$@)$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@

$(BUILD)/bpf/%.bpf.o: bpf/%.bpf.c $(wildcard bpf/*.h) $(BUILD)/vmlinux.h
	@mkdir -p $(@D)
	$(call say,BPF,$@)$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -I$(BUILD) -Ibpf -Wall -Werror -c $< -o $@

# libbpf's static linker: one object, its shared maps and variables merged.
$(BUILD)/bpf/ember.o: $(BPF_OBJS)
	$(call say,BPFLINK,$@)$(BPFTOOL) gen object $@ $^

$(BUILD)/bpf/ember.skel.h: $(BUILD)/bpf/ember.o
	$(call say,SKEL,$@)$(BPFTOOL) gen skeleton $< name ember_bpf > $@

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: lib/proto/%.proto
	@mkdir -p $(BUILD)/gen
	$(call say,PROTO,$<)protoc-c --c_out=$(BUILD)/gen -Ilib/proto $<

$(ASSET_SRC): scripts/embed-assets.sh $(WEB_FILES)
	@mkdir -p $(@D)
	$(call say,GEN,$@)scripts/embed-assets.sh $(WEB_FILES) > $@

# Rewritten only when VERSION or the git description changes, so that
# only lib/version.c is rebuilt then.
$(BUILD)/gen/version_gen.h: FORCE
	@mkdir -p $(@D)
	@printf '#define EMBER_RELEASE "%s"\n#define EMBER_SOURCE "%s"\n' '$(VERSION)' '$(SOURCE)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

FORCE:

# Every object may include the generated headers.
GEN_HEADERS := $(BUILD)/gen/version_gen.h $(BUILD)/gen/ingest.pb-c.h $(BUILD)/gen/otlp_profiles.pb-c.h $(BUILD)/gen/containerd.pb-c.h $(BUILD)/gen/pprof_profile.pb-c.h $(SKELS)

# --- objects and binaries ------------------------------------------------

$(BUILD)/obj/%.o: %.c | $(GEN_HEADERS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(ALL_CFLAGS) -c $< -o $@

# patterns.c embeds its table with .incbin: rebuilt when the table changes.
$(BUILD)/obj/server/query/patterns.o $(BUILD)/asan/server/query/patterns.o \
$(BUILD)/fuzz/obj/server/query/patterns.o: server/query/patterns.json

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c | $(GEN_HEADERS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(ALL_CFLAGS) -Wno-unused-parameter -c $< -o $@

$(BUILD)/asan/%.o: %.c | $(GEN_HEADERS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(ALL_CFLAGS) $(SAN) $(STRICT) -O1 -c $< -o $@

$(BUILD)/asan/gen/%.o: $(BUILD)/gen/%.c | $(GEN_HEADERS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(ALL_CFLAGS) $(SAN) -O1 -Wno-unused-parameter -c $< -o $@

$(BUILD)/bin/ember-agent: $(call obj,agent/main.c) $(AGENT_OBJS) $(LIB_OBJS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/ember-server: $(call obj,server/main.c) $(SERVER_OBJS) $(LIB_OBJS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/ember: $(call obj,cli/main.c) $(CLI_OBJS) $(CLI_SERVER_OBJS) $(LIB_OBJS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# --- tests ---------------------------------------------------------------

ASAN_LIB    := $(BUILD)/asan/libember.a
ASAN_OBJS   := $(call aobj,$(LIB_SRCS) $(GEN_SRCS) $(AGENT_SRCS) $(SERVER_SRCS) $(ASSET_SRC) $(CLI_SRCS))

$(ASAN_LIB): $(ASAN_OBJS)
	@rm -f $@
	$(call say,AR,$@)ar rcs $@ $^

UNIT_HDRS := $(wildcard tests/unit/*.h)
define unit_rule
$$(BUILD)/tests/$(basename $(notdir $(1))): $(1) $$(UNIT_HDRS) $$(ASAN_LIB)
	@mkdir -p $$(@D)
	$$(call say,CC,$$@)$$(CC) $$(ALL_CFLAGS) $$(SAN) $$(STRICT) -O1 -Itests/unit $$< -o $$@ $$(ASAN_LIB) $$(LDLIBS) -lcmocka
endef
$(foreach s,$(filter-out %/test_cuda_report.c %/test_nvtx_ranges.c,$(UNIT_SRCS)),$(eval $(call unit_rule,$(s))))

# A stand-in for NVML with known readings, which test_metrics loads
# (tests/unit/fake_nvml.c); built plain: it is dlopen'ed, never linked.
$(BUILD)/tests/libfake-nvml.so: tests/unit/fake_nvml.c | $(BUILD)/cuda-headers/include/nvml.h
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -g -fPIC -shared -Wall -Wextra -Werror -isystem $(BUILD)/cuda-headers/include $< -o $@ -lpthread

$(BUILD)/tests/test_metrics: $(BUILD)/tests/libfake-nvml.so

# Fuzz targets are built with clang's libFuzzer; the sources they exercise
# are compiled again with clang (into one archive) so a single sanitizer
# runtime is linked.
FUZZ_CFLAGS := -std=gnu11 -g -O1 -D_GNU_SOURCE -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -DEMBER_JSONW_STRICT -I. -Ilib -I$(BUILD)/gen -I$(BUILD)/bpf -Ibpf $(PKG_CFLAGS) \
               -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -Wall -Wextra -Werror \
               -Wno-unused-parameter -Wno-missing-field-initializers -MMD -MP
FUZZ_LIB    := $(BUILD)/fuzz/libember-fuzz.a
FUZZ_OBJS   := $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(patsubst $(BUILD)/%,%,$(LIB_SRCS) $(GEN_SRCS) $(AGENT_SRCS) $(SERVER_SRCS) $(ASSET_SRC)))

$(BUILD)/fuzz/obj/%.o: %.c | $(GEN_HEADERS)
	@mkdir -p $(@D)
	$(call say,CLANG,$@)$(CLANG) $(FUZZ_CFLAGS) -c $< -o $@

$(BUILD)/fuzz/obj/gen/%.o: $(BUILD)/gen/%.c | $(GEN_HEADERS)
	@mkdir -p $(@D)
	$(call say,CLANG,$@)$(CLANG) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_LIB): $(FUZZ_OBJS)
	@rm -f $@
	$(call say,AR,$@)ar rcs $@ $^

$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB)
	@mkdir -p $(@D)
	$(call say,CLANG,$@)$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB) -o $@ $(LDLIBS)

# Test workloads (tests/workloads/): programs with a known shape of CPU
# time. cpu_split keeps frame pointers in every function (clang; GCC 12
# drops them from leaf functions); the unwind_* ones are built the way
# production code is, without frame pointers.
RUSTC ?= $(shell command -v rustc 2>/dev/null || echo $(HOME)/.cargo/bin/rustc)
GO    ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
CXX   ?= g++
NOFP  := -O2 -fomit-frame-pointer -Wall -Wextra -Werror

$(BUILD)/workloads/cpu_split: tests/workloads/cpu_split.c Makefile
	@mkdir -p $(@D)
	$(call say,CLANG,$@)$(CLANG) -std=gnu11 -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-inline -Wall -Wextra -Werror $< -o $@

# offcpu_split: the same build, with threads.
$(BUILD)/workloads/offcpu_split: tests/workloads/offcpu_split.c Makefile
	@mkdir -p $(@D)
	$(call say,CLANG,$@)$(CLANG) -std=gnu11 -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-inline -Wall -Wextra -Werror -pthread $< -o $@

# offcpu_burst: many threads blocking all the time (a flood of off-CPU records).
$(BUILD)/workloads/offcpu_burst: tests/workloads/offcpu_burst.c Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -pthread $< -o $@

$(BUILD)/workloads/unwind_c $(BUILD)/workloads/unwind_lib: $(BUILD)/workloads/%: tests/workloads/%.c Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 $(NOFP) $< -o $@ -lrt

# recs_*: one planted performance problem each (tests/workloads/recs_planted.c,
# test_recommendations.py). Frame pointers kept; zlib and PCRE2 linked
# statically so that their internal functions have symbols.
$(BUILD)/workloads/recs_regex: tests/workloads/recs_planted.c Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -DPLANT_REGEX $< -o $@ -Wl,-Bstatic -lpcre2-8 -Wl,-Bdynamic
$(BUILD)/workloads/recs_zlib: tests/workloads/recs_planted.c Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -DPLANT_ZLIB $< -o $@ -Wl,-Bstatic -lz -Wl,-Bdynamic
$(BUILD)/workloads/recs_lock: tests/workloads/recs_planted.c Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -DPLANT_LOCK -pthread $< -o $@
$(BUILD)/workloads/recs_write: tests/workloads/recs_planted.c Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -DPLANT_WRITE $< -o $@

# metrics_load: one core, a known RSS and a known write rate (test_metrics.py).
$(BUILD)/workloads/metrics_load: tests/workloads/metrics_load.c Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -Wall -Wextra -Werror $< -o $@

$(BUILD)/workloads/unwind_cpp: tests/workloads/unwind_cpp.cpp Makefile
	@mkdir -p $(@D)
	$(call say,CXX,$@)$(CXX) -std=c++17 $(NOFP) $< -o $@

$(BUILD)/workloads/unwind_rust: tests/workloads/unwind_rust.rs Makefile
	@mkdir -p $(@D)
	$(call say,RUSTC,$@)$(RUSTC) --edition 2021 -C opt-level=3 -o $@ $<

$(BUILD)/workloads/unwind_go: tests/workloads/unwind_go.go Makefile
	@mkdir -p $(@D) $(BUILD)/go-cache
	$(call say,GO,$@)cd tests/workloads && GOCACHE=$(abspath $(BUILD))/go-cache $(GO) build -o $(abspath $@) unwind_go.go

# The same Go program stripped of its symbol table and DWARF (-s -w): only
# .gopclntab is left to name its functions.
$(BUILD)/workloads/unwind_go_stripped: tests/workloads/unwind_go.go Makefile
	@mkdir -p $(@D) $(BUILD)/go-cache
	$(call say,GO,$@)cd tests/workloads && GOCACHE=$(abspath $(BUILD))/go-cache $(GO) build -ldflags='-s -w' -o $(abspath $@) unwind_go.go

# TEST-ONLY: a real OpenID Connect provider (tests/oidc_provider: the OP
# package of github.com/zitadel/oidc, in-memory storage, a login step that
# approves at once) for tests/integration/test_oidc.py. Its modules come
# through the Go module proxy into the module cache on the first build;
# the test builds it when absent and skips (saying why) when it cannot.
$(BUILD)/oidc_provider: tests/oidc_provider/main.go tests/oidc_provider/go.mod tests/oidc_provider/go.sum Makefile
	@mkdir -p $(@D) $(BUILD)/go-cache
	$(call say,GO,$@)cd tests/oidc_provider && GOCACHE=$(abspath $(BUILD))/go-cache $(GO) build -o $(abspath $@) .

# A C++ program with DWARF, and its stripped copy (which is what runs and
# is profiled; the unstripped one is what a user uploads symbols from).
$(BUILD)/workloads/symbols_cpp: tests/workloads/symbols_cpp.cpp Makefile
	@mkdir -p $(@D)
	$(call say,CXX,$@)$(CXX) -std=c++17 -g $(NOFP) $< -o $@

$(BUILD)/workloads/symbols_cpp.stripped: $(BUILD)/workloads/symbols_cpp
	$(call say,STRIP,$@)objcopy --strip-all $< $@

# TEST-ONLY stand-in for libembercuda.so (tests/workloads/cuda_wire_client.c:
# the wire and the marker, no CUDA), and the program that "launches"
# through it (test_cuda_agent.py). Frame pointers kept, as in cpu_split.
$(BUILD)/workloads/cuda_wire/libembercuda.so: tests/workloads/cuda_wire_client.c lib/cuda_wire.h Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -g -fPIC -shared -fno-omit-frame-pointer -fvisibility=hidden -Wall -Wextra -Werror -Ilib $< -o $@

$(BUILD)/workloads/cuda_wire_launcher: tests/workloads/cuda_wire_launcher.c $(BUILD)/workloads/cuda_wire/libembercuda.so Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -g -fno-omit-frame-pointer -fno-inline -Wall -Wextra -Werror -Ilib $< -o $@ -L$(BUILD)/workloads/cuda_wire -lembercuda -Wl,-rpath,'$$ORIGIN/cuda_wire'

# TEST-ONLY: a CEL filter as SQL and as cel_eval's answer, side by side
# (tests/integration/test_clickhouse_celsql.py).
$(BUILD)/tests/cel_sql_tool: $(call obj,tests/tools/cel_sql_tool.c) $(SERVER_OBJS) $(LIB_OBJS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The library's split at its limits: gpu/cuda_report.c is not in libember.a.
$(BUILD)/bench/pcsplit_bench: bench/pcsplit_bench.c gpu/cuda_report.c gpu/cuda_report.h lib/cuda_wire.h
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 $(WARN) -O2 -D_GNU_SOURCE -Ilib -Igpu $< gpu/cuda_report.c -o $@

BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))

$(BUILD)/bench/%: $(call obj,bench/%.c) $(AGENT_OBJS) $(SERVER_OBJS) $(LIB_OBJS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

unit: $(UNIT_BINS)
fuzz: $(FUZZ_BINS)

run: deps-run
	@$(MAKE) --no-print-directory all
	@scripts/run.sh

test: deps
	@scripts/install-test-pydeps.sh
	@scripts/install-test-cudatools.sh
	@scripts/install-test-nvtx.sh
	@scripts/install-test-python.sh
	@$(MAKE) --no-print-directory all $(UNIT_BINS) $(FUZZ_BINS) $(WORKLOADS) $(BUILD)/bench/clickhouse_bench $(BUILD)/tests/cel_sql_tool
	@$(MAKE) --no-print-directory $(BUILD)/oidc_provider || echo "oidc_provider not built: tests/integration/test_oidc.py will skip"
	@scripts/install-test-npm.sh || echo "speedscope not installed: test_exports checks the speedscope export by structure only"
	@scripts/test.sh

bench: deps
	@$(MAKE) --no-print-directory all $(WORKLOADS) $(BENCH_BINS)
	@scripts/bench.sh

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -path '$(BUILD)/python3*' -prune -o -path '$(BUILD)/pydeps' -prune -o -name '*.d' -type f -print 2>/dev/null)

# --- GPU: libembercuda.so, the CUDA injection library (gpu/) ---------------
# Compiled against the CUPTI headers of Debian's non-free libcupti-dev,
# fetched into $(BUILD)/cuda-headers by scripts/fetch-cuda-headers.sh
# (verified, never installed), and gpu/cuda_min/ standing in for cuda.h.
# Links no NVIDIA library: libcupti and libcuda are dlopen'ed at run time.
# CUDA_HEADERS=dir uses CUPTI headers from elsewhere (e.g. a CUDA toolkit's
# extras/CUPTI/include) and skips the download.
GPU_LIB      := $(BUILD)/lib/libembercuda.so
GPU_SRCS     := $(wildcard gpu/*.c)
GPU_OBJS     := $(patsubst %.c,$(BUILD)/gpu-obj/%.o,$(GPU_SRCS))
CUDA_HEADERS ?= $(BUILD)/cuda-headers/include
GPU_CFLAGS   := -std=gnu11 $(WARN) $(CFLAGS) -D_GNU_SOURCE -fPIC -fvisibility=hidden -Ilib -Igpu -Igpu/cuda_min \
                -isystem $(CUDA_HEADERS) -DEMBERCUDA_VERSION='"$(VERSION)"' -MMD -MP

all: $(GPU_LIB)

# The CUPTI headers and nvml.h (Debian's libnvidia-ml-dev, for the agent's
# GPU metrics, agent/gpumetrics.c: NVML is dlopen'ed, never linked) come
# from one fetch: a grouped target, so that make -j runs it once (two runs
# at once tore each other's folder down).
$(BUILD)/cuda-headers/include/cupti_activity.h $(BUILD)/cuda-headers/include/nvml.h &:
	$(call say,FETCH,$(BUILD)/cuda-headers)scripts/fetch-cuda-headers.sh

NVML_USERS := $(call obj,agent/gpumetrics.c) $(call aobj,agent/gpumetrics.c) $(BUILD)/fuzz/obj/agent/gpumetrics.o
$(NVML_USERS): ALL_CFLAGS += -isystem $(CUDA_HEADERS)
$(NVML_USERS): FUZZ_CFLAGS += -isystem $(CUDA_HEADERS)
$(NVML_USERS): | $(CUDA_HEADERS)/nvml.h

$(BUILD)/gpu-obj/%.o: %.c | $(CUDA_HEADERS)/cupti_activity.h
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(GPU_CFLAGS) -c $< -o $@

$(GPU_LIB): $(GPU_OBJS)
	@mkdir -p $(@D)
	$(call say,CCLD,$@)$(CC) $(CFLAGS) -shared -fPIC -Wl,-z,defs -Wl,--no-as-needed $^ -o $@ -l:libdl.so.2 -l:libpthread.so.0

.PHONY: gpu
gpu: $(GPU_LIB)

# ember-agent carries the library (agent/cuda_blob.S, agent/cudaship.h).
$(BUILD)/obj/agent/cuda_blob.o: agent/cuda_blob.S $(GPU_LIB)
	@mkdir -p $(@D)
	$(call say,AS,$@)$(CC) -c -I$(BUILD)/lib $< -o $@
$(BUILD)/bin/ember-agent: $(BUILD)/obj/agent/cuda_blob.o

# Tests only: the fake driver and CUPTI (tests/fake_cuda/; the product
# never loads them: tests name their directories in LD_LIBRARY_PATH) and
# the programs that launch through them (tests/workloads/cuda_launch.c,
# tests/workloads/py_cuda_launch.py).
FAKE_CUDA    := $(BUILD)/tests/fake_cuda/libcupti.so $(BUILD)/tests/fake_cuda/driver/libcuda.so.1
FAKE_CFLAGS  := -std=gnu11 -O1 -g -fPIC -shared -fvisibility=hidden $(WARN) -D_GNU_SOURCE -Itests/fake_cuda \
                -Igpu/cuda_min -isystem $(CUDA_HEADERS)
WORKLOADS    += $(BUILD)/workloads/cuda_launch $(FAKE_CUDA) $(GPU_LIB)

$(BUILD)/tests/fake_cuda/libcupti.so: tests/fake_cuda/fake_cupti.c tests/fake_cuda/fake_cuda.h | $(CUDA_HEADERS)/cupti_activity.h
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(FAKE_CFLAGS) -Wl,-soname,libcupti.so $< -o $@ -lpthread

$(BUILD)/tests/fake_cuda/driver/libcuda.so.1: tests/fake_cuda/fake_cuda.c tests/fake_cuda/fake_cuda.h | $(CUDA_HEADERS)/cupti_activity.h
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(FAKE_CFLAGS) -Wl,-soname,libcuda.so.1 $< -o $@ -ldl -lpthread

$(BUILD)/workloads/cuda_launch: tests/workloads/cuda_launch.c Makefile
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -g -fno-omit-frame-pointer -fno-inline $(WARN) $< -o $@ -ldl -lpthread

# The NVTX workload, built against NVIDIA's nvtx3 headers (header-only;
# TEST-ONLY, fetched into $(BUILD)/nvtx by scripts/install-test-nvtx.sh).
WORKLOADS    += $(BUILD)/workloads/cuda_nvtx

$(BUILD)/nvtx/include/nvtx3/nvToolsExt.h:
	$(call say,FETCH,$(BUILD)/nvtx)scripts/install-test-nvtx.sh

$(BUILD)/workloads/cuda_nvtx: tests/workloads/cuda_nvtx.c Makefile | $(BUILD)/nvtx/include/nvtx3/nvToolsExt.h
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 -O1 -g -fno-omit-frame-pointer -fno-inline $(WARN) -isystem $(BUILD)/nvtx/include $< -o $@ -ldl

.PHONY: gpu-test
gpu-test: $(GPU_LIB) $(FAKE_CUDA) $(BUILD)/workloads/cuda_launch

# The library's pure part (aggregation, spans, wire encoding), unit-tested
# with the sanitizers like the rest; its own rule: it is not in libember.a.
$(BUILD)/tests/test_cuda_report: tests/unit/agent/test_cuda_report.c gpu/cuda_report.c gpu/cuda_report.h lib/cuda_wire.h tests/unit/testutil.h agent/cuda_wire_parse.c agent/cuda_wire_parse.h
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 $(WARN) -g $(SAN) -O1 -D_GNU_SOURCE -Ilib -Igpu -Iagent -Itests/unit $< gpu/cuda_report.c agent/cuda_wire_parse.c -o $@ -lcmocka

# The library's NVTX range stack at its limits (gpu/nvtx_ranges.c).
$(BUILD)/tests/test_nvtx_ranges: tests/unit/agent/test_nvtx_ranges.c gpu/nvtx_ranges.c gpu/nvtx_ranges.h lib/cuda_wire.h tests/unit/testutil.h
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) -std=gnu11 $(WARN) -g $(SAN) -O1 -D_GNU_SOURCE -Ilib -Igpu -Itests/unit $< gpu/nvtx_ranges.c -o $@ -lcmocka
