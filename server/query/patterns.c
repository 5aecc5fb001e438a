/* patterns.c - see patterns.h. The table is the knowledge base; each
 * entry is described for users in docs/recommendations.md. */
#include "patterns.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <string.h>

#include "server/store/store.h"
#include "util.h"

#define ON (1u << SEK_ON_CPU)
#define OFF (1u << SEK_OFF_CPU)
#define GPU (1u << SEK_CUDA)
#define T(x) (1u << SFT_##x)
#define NATIVE_ANY (T(NATIVE) | T(GO) | T(KERNEL) | T(JVM) | T(DOTNET) | T(V8))

const struct pattern pat_table[] = {
	/* --- CUDA (GPU time) ------------------------------------------------ */
	{ .id = "cuda-sync-htod-copy", .title = "Synchronous host-to-device copies",
	  .category = "cuda", .kinds = GPU, .anchor = "^(HtoD|HtoA|memcpy)$",
	  .anchor_types = T(CUDA_MEMCPY), .depth = 1,
	  .caller = "^(cudaMemcpy|cudaMemcpy2D|cudaMemcpy3D|cudaMemcpyToSymbol|cuMemcpyHtoD|cuMemcpy|cuMemcpy2D)$",
	  .caller_types = T(CUDA_LAUNCH), .min_share = 0.005, .removes = 0.7,
	  .explanation = "Host-to-device copies are issued with a synchronous copy call (no Async): "
			 "the launching thread and the stream wait for every copy, usually from "
			 "pageable memory that the driver stages through a bounce buffer, so "
			 "copies never overlap with kernels.",
	  .actions = { "Allocate the host buffers as pinned memory (cudaMallocHost / "
		       "tensor.pin_memory()) and copy with cudaMemcpyAsync (non_blocking=True) on a "
		       "stream other than the compute stream",
		       "Overlap the copy of batch n+1 with the kernels of batch n (double buffering, "
		       "DataLoader(pin_memory=True))",
		       "Keep data resident on the GPU between steps instead of copying it again" } },
	{ .id = "cuda-pageable-copy", .title = "Copies from pageable host memory",
	  .category = "cuda", .kinds = GPU, .anchor = "^(HtoD|DtoH)$", .anchor_types = T(CUDA_MEMCPY),
	  .depth = 1, .caller = "Async", .caller_types = T(CUDA_LAUNCH), .min_share = 0.005,
	  .removes = 0.5,
	  .explanation = "Asynchronous copies take a large share of GPU time. Unless the host "
			 "memory is pinned, an Async copy is staged and serialised like a "
			 "synchronous one.",
	  .actions = { "Pin the host buffers (cudaHostAlloc / pin_memory()) so copies run on the copy "
		       "engines concurrently with kernels",
		       "Batch small copies into one larger transfer" } },
	{ .id = "cuda-dtoh-in-loop", .title = "Device-to-host copies in the step loop",
	  .category = "cuda", .kinds = GPU, .anchor = "^DtoH$", .anchor_types = T(CUDA_MEMCPY),
	  .depth = 1, .min_share = 0.005, .removes = 0.8,
	  .explanation = "Results are copied back to the host on the hot path (tensor.item(), "
			 ".cpu(), .numpy(), printing losses): each copy waits for every kernel "
			 "queued before it, draining the GPU's queue.",
	  .actions = { "Accumulate metrics on the GPU and copy them once every N steps",
		       "Use non_blocking copies into pinned buffers and read them a step later" } },
	{ .id = "cuda-host-sync", .title = "GPU idle while the host synchronizes",
	  .category = "cuda", .kinds = GPU, .anchor = ".", .anchor_types = T(CUDA_SYNC), .depth = 1,
	  .min_share = 0.005, .removes = 0.7,
	  .explanation = "The launching thread blocks in a synchronization (stream, event or "
			 "device synchronize) and does its own CPU work between launches, so the "
			 "GPU waits for the CPU: the queue of work runs dry.",
	  .actions = { "Remove synchronizations from the step loop (torch.cuda.synchronize, "
		       ".item(), blocking copies); synchronize once per step at most",
		       "Capture the step in a CUDA graph so the CPU launches it with one call",
		       "Move data preparation to worker threads or processes" } },
	{ .id = "cuda-layout-conversion", .title = "Tensor layout conversions on the GPU",
	  .category = "cuda", .kinds = GPU,
	  .anchor = "(?i)(nchwToNhwc|nhwcToNchw|nchw_?to_?nhwc|nhwc_?to_?nchw|TensorTransform|"
		    "transpose_?kernel|convertTensor|permute_?kernel|layoutTransform)",
	  .anchor_types = T(CUDA_KERNEL), .depth = 1, .min_share = 0.005, .removes = 0.9,
	  .explanation = "Kernels spend GPU time converting tensors between NCHW and NHWC "
			 "layouts around convolutions: the model and the kernels (cuDNN, Tensor "
			 "Cores prefer NHWC) disagree on the memory format.",
	  .actions = { "Keep the model and its inputs in channels_last "
		       "(model.to(memory_format=torch.channels_last))",
		       "Export with the layout the inference engine uses (TensorRT, ONNX Runtime)" } },
	{ .id = "cuda-memset", .title = "GPU memsets on the hot path", .category = "cuda",
	  .kinds = GPU, .anchor = ".", .anchor_types = T(CUDA_MEMSET), .depth = 1,
	  .min_share = 0.005, .removes = 0.8,
	  .explanation = "Buffers are zero-filled on every step (torch.zeros, cudaMemset) though "
			 "they are overwritten afterwards.",
	  .actions = { "Allocate with torch.empty / without memset when every element is written",
		       "Reuse buffers across steps" } },
	{ .id = "cuda-memory-bound", .title = "Memory-bound kernel (PC sampling)",
	  .category = "cuda", .kinds = GPU,
	  .anchor = "(?i)(long_?scoreboard|lg_?throttle|memory_?throttle|mio_?throttle|tex_?throttle|drain)",
	  .anchor_types = T(CUDA_STALL), .depth = 2, .min_share = 0.005, .removes = 0.3,
	  .explanation = "PC sampling shows the kernel's warps mostly stalled waiting for global "
			 "memory: it is bound by memory bandwidth, not compute.",
	  .actions = { "Fuse this kernel with its neighbours so intermediate tensors stay in "
		       "registers or shared memory (torch.compile, custom fused kernels)",
		       "Use lower precision (bf16/fp8) to halve the bytes moved",
		       "Improve coalescing: make the innermost index contiguous" } },
	/* --- CPU side of CUDA ------------------------------------------------ */
	{ .id = "cuda-launch-bound", .title = "Many tiny kernels: CPU-bound kernel launches",
	  .category = "cuda", .kinds = ON,
	  .anchor = "^(cuLaunchKernel|cuLaunchKernelEx|cudaLaunchKernel|cudaLaunchKernel_ptsz|"
		    "cudaLaunchKernelExC|cuLaunchCooperativeKernel)$",
	  .depth = 24, .min_share = 0.005, .removes = 0.8,
	  .explanation = "The CPU spends its time launching kernels: each launch costs a few "
			 "microseconds of CPU, and when kernels are tiny the GPU finishes them "
			 "faster than the CPU issues them (launch-bound).",
	  .actions = { "Capture the step in a CUDA graph (torch.cuda.graphs, "
		       "torch.compile(mode=\"reduce-overhead\"), cudaGraphLaunch)",
		       "Fuse elementwise kernels (torch.compile, custom kernels)",
		       "Increase the batch size so each kernel does more work" } },
	/* --- regular expressions ------------------------------------------- */
	{ .id = "regex-compile", .title = "Regular expression compiled on every call",
	  .category = "regex", .kinds = ON,
	  .anchor = "^(pcre2_compile(_8|_16|_32)?|pcre_compile2?|regcomp|re_compile_internal|"
		    "re_compile_pattern|re_compile_fastmap|regexp\\.compile|regexp\\.Compile|"
		    "regexp\\.MustCompile|regexp/syntax\\.Parse|regexp/syntax\\.Compile|"
		    "_sre\\.compile|sre_compile\\.compile|re\\._compile|"
		    "std::__detail::_Compiler.*|std::basic_regex.*|re2::RE2::Init|onig_new|"
		    "java\\.util\\.regex\\.Pattern\\.compile)$",
	  .depth = 40, .exclude = "^(pcre2_jit_match|pcre2_match(_8)?)$",
	  .min_share = 0.005, .removes = 0.95,
	  .explanation = "A regular expression is compiled on the hot path, on every call, "
			 "although the pattern does not change: compiling parses the pattern and "
			 "builds its matcher, which costs far more than matching a short subject.",
	  .actions = { "Compile the pattern once (at start-up or in a static/global) and reuse "
		       "the compiled object",
		       "For PCRE2, also JIT-compile it once (pcre2_jit_compile) and match with "
		       "pcre2_jit_match",
		       "When the pattern is a fixed string, use a substring search instead" } },
	{ .id = "python-regex-compile", .title = "Python regular expression compiled on every call",
	  .category = "regex", .kinds = ON, .anchor = "^(_compile|compile|_parse|_parse_sub|_code|parse)$",
	  .anchor_types = T(CPYTHON), .depth = 40,
	  .binary = "(^|/)(re/__init__\\.py|re\\.py|sre_compile\\.py|sre_parse\\.py|re/_compiler\\.py|"
		    "re/_parser\\.py)$",
	  .min_share = 0.005, .removes = 0.9,
	  .explanation = "re.compile (or re.match/re.sub with a pattern string whose compiled "
			 "form fell out of re's small cache) compiles a pattern on the hot path.",
	  .actions = { "Compile the pattern once at module level (PATTERN = re.compile(...)) and "
		       "call PATTERN.match",
		       "Keep the number of distinct patterns under re's cache size (512), or cache "
		       "compiled patterns yourself" } },
	{ .id = "regex-match", .title = "Regular expression matching dominates",
	  .category = "regex", .kinds = ON,
	  .anchor = "^(pcre2_match(_8)?|match|internal_dfa_match|regexec|re_search_internal|"
		    "re_search_stub|check_matching|regexp\\.\\(\\*Regexp\\)\\.(doExecute|backtrack|"
		    "doOnePass|tryBacktrack)|regexp\\.\\(\\*machine\\)\\.\\w+|sre_(match|search)|"
		    "_sre\\.\\w+|std::__detail::_Executor.*|onig_search|onig_match)$",
	  .depth = 6,
	  .min_share = 0.01, .removes = 0.5,
	  .explanation = "Matching regular expressions takes a large share of CPU: a backtracking "
			 "matcher without JIT, or a pattern tried on every line when a cheap "
			 "prefilter would reject most.",
	  .actions = { "JIT-compile PCRE2 patterns (pcre2_jit_compile) or use RE2/Hyperscan for "
		       "many patterns",
		       "Prefilter with a substring search (memmem/strstr) before running the regex",
		       "Anchor patterns and avoid nested quantifiers that backtrack" } },
	/* --- compression ------------------------------------------------------ */
	{ .id = "zlib-high-level", .title = "zlib compression at a high level",
	  .category = "compression", .kinds = ON, .anchor = "^deflate_slow$",
	  .depth = 3, .min_share = 0.005, .removes = 0.75,
	  .explanation = "zlib's deflate_slow (and the longest_match searches it makes) runs only at compression levels 4-9: "
			 "the high levels search far for longer matches and cost several times "
			 "the CPU of level 1 for a few percent smaller output.",
	  .actions = { "Use zstd (level 1-3): faster than zlib level 1 with a better ratio than "
		       "level 9",
		       "If the format must stay gzip/deflate, use level 1 (Z_BEST_SPEED) or libdeflate",
		       "Compress once and cache the result when the same payload is sent repeatedly" } },
	{ .id = "zlib-deflate", .title = "zlib deflate compression", .category = "compression",
	  .kinds = ON, .anchor = "^(deflate_fast|deflate_stored|deflate_rle|deflate_huff|fill_window|"
				"compress_block|send_tree|build_tree|pqdownheap|_tr_flush_block|"
				"compress_block_internal)$",
	  .depth = 3, .min_share = 0.005, .removes = 0.5,
	  .explanation = "zlib's deflate takes a large share of CPU even at a low level; modern "
			 "codecs compress several times faster.",
	  .actions = { "Switch to zstd or lz4 where both ends can", "Use libdeflate or zlib-ng as a "
		       "drop-in for gzip output" } },
	{ .id = "zlib-inflate", .title = "zlib decompression", .category = "compression",
	  .kinds = ON, .anchor = "^(inflate_fast|inflate|inflate_table|updatewindow|inflate_stored)$",
	  .depth = 3, .min_share = 0.005, .removes = 0.4,
	  .explanation = "Decompressing deflate/gzip data with zlib; zlib-ng and libdeflate inflate "
			 "2-3x faster, zstd much faster.",
	  .actions = { "Link zlib-ng (compat mode) or libdeflate", "Store or send data as zstd",
		       "Cache decompressed data that is read repeatedly" } },
	{ .id = "go-flate", .title = "Go compress/flate (gzip) compression",
	  .category = "compression", .kinds = ON,
	  .anchor = "^compress/flate\\.(\\(\\*compressor\\)\\.(deflate|findMatch|encSpeed|fillDeflate)|"
		    "\\(\\*huffmanBitWriter\\)\\.\\w+|\\(\\*decompressor\\)\\.\\w+|matchLen|hash4)$",
	  .depth = 4, .min_share = 0.005, .removes = 0.6,
	  .explanation = "The standard library's compress/flate is slow, especially at the "
			 "default and best levels.",
	  .actions = { "Use github.com/klauspost/compress (gzip, zstd) as a drop-in",
		       "Use gzip.BestSpeed or switch the format to zstd" } },
	/* --- hashing and checksums ------------------------------------------- */
	{ .id = "crc-software", .title = "CRC checksums without hardware acceleration",
	  .category = "hashing", .kinds = ON,
	  .anchor = "^(crc32_z|crc32|crc32_little|crc32_big|crc32_braid|crc32c_sw|crc32_sw|"
		    "crc32c|crc32c_generic|crc_\\w*|hash/crc32\\.(simpleUpdate|slicingUpdate|update|"
		    "Update|ChecksumIEEE)|crc32c_.*table.*)$",
	  .depth = 2, .exclude = "(?i)(pclmul|sse4|sse42|avx|_hw$|_intel$|archUpdate|crc32_le_arm64|vpclmul)",
	  .min_share = 0.005, .removes = 0.85,
	  .explanation = "A table-driven software CRC runs one byte (or a few) per step; CPUs have "
			 "CRC32C instructions and carry-less multiplication that checksum 10-30x "
			 "faster.",
	  .actions = { "Use a hardware-accelerated implementation (zlib-ng, ISA-L crc32, "
		       "crc32c with SSE4.2/ARMv8 CRC, Go's hash/crc32 with the Castagnoli table)",
		       "Checksum larger buffers at once instead of many small pieces" } },
	{ .id = "hash-generic", .title = "Cryptographic hashing in generic (non-accelerated) code",
	  .category = "hashing", .kinds = ON,
	  .anchor = "^(sha256_block_data_order(_nohw|_c)?|SHA256_Transform|sha256_transform|"
		    "sha256_generic\\w*|sha256_process\\w*|sha256_compress|sha1_block_data_order(_nohw|_c)?|"
		    "SHA1_Transform|md5_block_data_order|MD5_Transform|md5_block_asm_data_order|"
		    "crypto/sha256\\.blockGeneric|crypto/sha1\\.blockGeneric|crypto/md5\\.block(Generic)?|"
		    "crypto/sha512\\.blockGeneric|sha512_block_data_order(_nohw)?)$",
	  .depth = 3, .exclude = "(?i)(shaext|_avx|avx2|_ssse3|_ni$|_hw$|blockAMD64|blockSHANI|_neon|blockAVX)",
	  .min_share = 0.005, .removes = 0.6,
	  .explanation = "Hashes are computed with the generic code path rather than the CPU's SHA "
			 "extensions, or with a cryptographic hash where a non-cryptographic one "
			 "would do (cache keys, sharding, deduplication).",
	  .actions = { "Use OpenSSL 3 / BoringSSL builds that use SHA-NI or ARMv8 SHA "
		       "instructions (check OPENSSL_ia32cap is not masking them)",
		       "Where collision resistance is not needed, use xxHash/XXH3 or BLAKE3",
		       "Hash once and cache the digest of unchanged data" } },
	/* --- serialization ---------------------------------------------------- */
	{ .id = "json-serialization", .title = "JSON encoding and decoding", .category = "serialization",
	  .kinds = ON,
	  .anchor = "(?i)(^encoding/json\\.|json_dumps|json_loads|json_object|json_pack|json_unpack|"
		    "^cJSON_|yyjson|rapidjson|nlohmann::|simdjson|^_json\\.|encode_basestring|"
		    "scanner_call|scan_once_unicode|_json_|ujson|orjson|jansson|^json\\.|JsonSerializer|"
		    "jackson|Utf8JsonWriter)",
	  .depth = 12, .binary = NULL, .min_share = 0.005, .removes = 0.5,
	  .explanation = "Encoding or decoding JSON takes a large share of CPU: text formats parse "
			 "and format numbers and escape strings byte by byte, and reflection-based "
			 "encoders allocate per field.",
	  .actions = { "Use a faster codec (orjson, simdjson, sonic/jsoniter for Go, "
		       "System.Text.Json source generators)",
		       "Avoid re-encoding: cache serialized responses, decode only needed fields",
		       "Switch internal traffic to a binary format (protobuf, flatbuffers)" } },
	{ .id = "protobuf-serialization", .title = "Protocol Buffers serialization",
	  .category = "serialization", .kinds = ON,
	  .anchor = "(google::protobuf::|^protobuf_c_message_(pack|unpack|get_packed_size)|"
		    "^google\\.golang\\.org/protobuf/|^github\\.com/golang/protobuf/|^upb_|^_upb_|"
		    "^proto\\.(Marshal|Unmarshal|Size)|MessageToJson|ParseFromString|SerializeToString)",
	  .depth = 12, .min_share = 0.005, .removes = 0.35,
	  .explanation = "Marshalling and unmarshalling protobuf messages takes a large share of "
			 "CPU, often from serializing the same message more than once or from "
			 "reflection-based code.",
	  .actions = { "Serialize once and reuse the bytes (e.g. for fan-out)",
		       "Use generated fast paths (vtprotobuf for Go, arenas in C++)",
		       "Trim large repeated fields that are not needed downstream" } },
	/* --- allocation and memory ---------------------------------------- */
	{ .id = "python-gc", .title = "Python garbage collector pressure", .category = "gc",
	  .kinds = ON,
	  .anchor = "^(gc_collect_main|gc_collect_region|gc_collect_generations|gc_collect_increment|"
		    "gc_collect_full|collect|deduce_unreachable|visit_reachable|subtract_refs|update_refs|"
		    "move_unreachable|visit_decref|_PyGC_Collect|_Py_RunGC|dict_traverse|list_traverse|"
		    "tupletraverse|subtype_traverse)$",
	  .depth = 8, .binary = "(?i)(python|libpython)", .min_share = 0.005, .removes = 0.7,
	  .explanation = "Python's cyclic garbage collector runs often and walks many container "
			 "objects: allocation of many tracked objects triggers generation-0 "
			 "collections that repeatedly traverse long-lived data.",
	  .actions = { "Call gc.freeze() after start-up so long-lived objects are not traversed",
		       "Raise the thresholds (gc.set_threshold) or disable gc around allocation bursts",
		       "Break reference cycles so objects are freed by reference counting" } },
	{ .id = "python-numeric-loop", .title = "Interpreter overhead in a numeric Python loop",
	  .category = "interpreter", .kinds = ON,
	  .anchor = "^(_PyEval_EvalFrameDefault|PyNumber_(Add|Subtract|Multiply|TrueDivide|FloorDivide|"
		    "Remainder|Power|InPlaceAdd|InPlaceMultiply|InPlaceSubtract)|binary_op1?|"
		    "long_(add|sub|mul|compare|richcompare|div|mod|pow)|float_(add|sub|mul|div|richcompare|pow)|"
		    "x_add|x_sub|k_mul|_PyLong_(Add|Subtract|Multiply)|PyObject_RichCompare|"
		    "do_richcompare|_Py_(Add|Multiply)|range_iterator_next|rangeiter_next|"
		    "_PyEval_BinaryOps|binary_op_(add|mult|sub)\\w*|PyFloat_FromDouble|"
		    "_PyFloat_ExactDealloc|float_dealloc|_PyLong_New|_PyLong_FromLong|PyLong_FromLong|"
		    "long_dealloc|_Py_NewReference|listiter_next|rangeiter_next|list_subscript|"
		    "PyFloat_AsDouble)$",
	  .depth = 3, .caller = ".", .caller_types = T(CPYTHON), .min_share = 0.005, .removes = 0.9,
	  .explanation = "CPU time goes to the CPython interpreter itself (bytecode dispatch, boxed "
			 "integer and float arithmetic, comparisons, creating and freeing the "
			 "float and int objects each operation returns) rather than to library code: "
			 "a numeric loop written in pure Python runs 10-100x slower than the same "
			 "arithmetic vectorized.",
	  .actions = { "Vectorize the loop with NumPy (or pandas) operations on whole arrays",
		       "Compile the function with Numba (@njit) or Cython",
		       "Use built-ins (sum, math.fsum, itertools) instead of explicit loops" } },
	{ .id = "python-object-churn", .title = "Python object allocation churn",
	  .category = "allocation", .kinds = ON,
	  .anchor = "^(_PyObject_Malloc|PyObject_Malloc|pymalloc_alloc|_PyObject_Free|PyObject_Free|"
		    "pymalloc_free|_Py_Dealloc|object_dealloc|list_dealloc|dict_dealloc|tupledealloc|"
		    "PyObject_GC_Del|_PyObject_GC_New|gc_alloc|_PyObject_GC_Link|PyTuple_New|"
		    "_PyTuple_FromArray|PyList_New|PyDict_New|new_dict|subtype_dealloc)$",
	  .depth = 4, .caller = ".", .caller_types = T(CPYTHON), .min_share = 0.005, .removes = 0.5,
	  .explanation = "The interpreter spends its time creating and freeing small objects "
			 "(ints, floats, tuples, lists) in a Python loop.",
	  .actions = { "Vectorize the loop with NumPy or move it to a compiled extension "
		       "(Cython, Rust/PyO3)",
		       "Reuse containers instead of building new lists/tuples per iteration",
		       "Use __slots__ or arrays for many small records" } },
	{ .id = "go-gc", .title = "Go garbage collector pressure", .category = "gc", .kinds = ON,
	  .anchor = "^runtime\\.(gcBgMarkWorker|gcDrain\\w*|scanobject|scanblock|greyobject|findObject|"
		    "markroot\\w*|gcAssistAlloc\\w*|bgsweep|sweepone|scanstack|wbBufFlush1|"
		    "\\(\\*gcWork\\)\\.\\w+|\\(\\*mspan\\)\\.sweep|typePointers\\.\\w+|"
		    "\\(\\*mspan\\)\\.typePointersOf\\w*)$",
	  .depth = 6, .min_share = 0.005, .removes = 0.6,
	  .explanation = "The Go garbage collector's mark and sweep work takes a large share of "
			 "CPU: the program allocates quickly relative to its live heap, so GC "
			 "cycles run often.",
	  .actions = { "Set a memory limit and a higher GOGC (GOMEMLIMIT=..., GOGC=200-400) when "
		       "memory allows",
		       "Reduce allocation: reuse buffers (sync.Pool), preallocate slices, avoid "
		       "pointers in large structures",
		       "Profile allocations (alloc_space) to find the allocating call sites" } },
	{ .id = "go-alloc", .title = "Go heap allocation (mallocgc)", .category = "allocation",
	  .kinds = ON,
	  .anchor = "^runtime\\.(mallocgc\\w*|nextFreeFast|\\(\\*mcache\\)\\.(nextFree|refill)|"
		    "\\(\\*mcentral\\)\\.\\w+|memclrNoHeapPointers|newobject|makeslice|growslice|"
		    "rawstring\\w*|concatstrings|slicebytetostring|mapassign\\w*|makemap\\w*|"
		    "heapSetType\\w*|\\(\\*mheap\\)\\.alloc\\w*)$",
	  .depth = 4, .min_share = 0.005, .removes = 0.5,
	  .explanation = "Allocating on the Go heap (and the GC work it causes later) takes a large "
			 "share of CPU: short-lived objects, growing slices, string concatenation "
			 "and conversions.",
	  .actions = { "Preallocate slices and maps with their final capacity",
		       "Reuse buffers with sync.Pool; avoid []byte<->string conversions",
		       "Keep values on the stack: avoid pointers to short-lived objects escaping "
		       "(go build -gcflags=-m)" } },
	{ .id = "jvm-gc", .title = "JVM garbage collection", .category = "gc", .kinds = ON,
	  .anchor = "^(G1\\w+|PSPromotionManager\\w*|PSScavenge\\w*|ParallelCompactData\\w*|ZMark\\w*|"
		    "ZHeap\\w*|Shenandoah\\w*|OopMapCache\\w*|MarkSweep\\w*|GCTaskThread\\w*|"
		    "ScavengeRootsTask\\w*|G1ParScanThreadState\\w*)(::.*)?$",
	  .depth = 8, .min_share = 0.005, .removes = 0.6,
	  .explanation = "The JVM's collector threads take a large share of CPU: allocation rate "
			 "high relative to the heap size.",
	  .actions = { "Increase the heap (-Xmx) or young generation so collections run less often",
		       "Reduce allocation in the hot path (object reuse, primitive collections)",
		       "Try a collector fitted to the workload (G1 tuned pause goal, ZGC)" } },
	{ .id = "lock-contention", .title = "Lock contention (spinning and futex calls)",
	  .category = "locking", .kinds = ON,
	  .anchor = "^(__lll_lock_wait|__lll_lock_wake|__lll_lock_wait_private|pthread_mutex_lock|"
		    "___pthread_mutex_lock|__pthread_mutex_lock\\w*|__pthread_mutex_unlock\\w*|"
		    "pthread_mutex_unlock|lll_mutex_lock_optimized|futex_wait\\w*|futex_wake\\w*|"
		    "__futex_abstimed_wait\\w*|do_futex|__x64_sys_futex|__arm64_sys_futex|"
		    "runtime\\.lock2|runtime\\.futex|runtime\\.futexsleep|"
		    "sync\\.\\(\\*Mutex\\)\\.lockSlow|sync\\.\\(\\*RWMutex\\)\\.\\w+|"
		    "runtime\\.semacquire\\w*|runtime\\.semrelease\\w*|pthread_spin_lock|"
		    "pthread_rwlock_\\w+lock)$",
	  .depth = 12, .min_share = 0.005, .removes = 0.7,
	  .explanation = "Threads spend CPU acquiring and releasing a contended lock (spinning, "
			 "futex system calls, waking waiters): a lock convoy where every thread "
			 "serializes on one mutex.",
	  .actions = { "Shrink the critical section: do the work outside the lock, hold it only "
		       "to publish results",
		       "Shard the lock or the data (per-thread or per-CPU state merged later)",
		       "Use lock-free structures or atomics for counters and queues" } },
	{ .id = "lock-wait", .title = "Threads blocked on locks (off-CPU)", .category = "locking",
	  .kinds = OFF,
	  .anchor = "^(__lll_lock_wait|__lll_lock_wait_private|pthread_mutex_lock|___pthread_mutex_lock|"
		    "__pthread_mutex_lock\\w*|lll_mutex_lock_optimized|futex_wait\\w*|"
		    "__futex_abstimed_wait\\w*|pthread_rwlock_\\w+lock|sem_wait|"
		    "sync\\.\\(\\*Mutex\\)\\.(Lock|lockSlow)|sync\\.\\(\\*RWMutex\\)\\.\\w+|"
		    "runtime\\.semacquire\\w*|rwsem_down_\\w+|__mutex_lock\\w*|mutex_lock)$",
	  .depth = 16,
	  .exclude = "^(pthread_cond_(timed)?wait\\w*|___pthread_cond_wait|epoll_wait|"
		     "__x64_sys_epoll_wait|do_epoll_wait|runtime\\.netpoll\\w*|runtime\\.notetsleep\\w*|"
		     "runtime\\.gopark|__x64_sys_nanosleep|hrtimer_nanosleep)$",
	  .min_share = 0.005, .removes = 0.7,
	  .explanation = "Threads are off CPU waiting for a mutex held by another thread: the "
			 "lock serializes work that could run in parallel (a lock convoy).",
	  .actions = { "Shrink the critical section: move I/O and computation out of the lock",
		       "Shard the lock or the data; use reader/writer locks for read-mostly data",
		       "Replace shared counters and queues with atomics or per-thread structures" } },
	/* --- system calls, kernel -------------------------------------------- */
	{ .id = "small-io-syscalls", .title = "System-call-heavy I/O (many small reads/writes)",
	  .category = "syscalls", .kinds = ON,
	  .anchor = "^(write|read|__write|__read|__libc_write|__libc_read|__GI___libc_write|"
		    "__GI___libc_read|__write_nocancel|__read_nocancel|pwrite64|pread64|__libc_pwrite64|"
		    "__libc_pread64|send|recv|__libc_send|__libc_recv|writev|readv|"
		    "syscall\\.(Syscall|Syscall6|RawSyscall|write|read|Write|Read)|"
		    "internal/runtime/syscall\\.Syscall6|internal/poll\\.ignoringEINTRIO|"
		    "ksys_write|ksys_read|vfs_write|vfs_read|__x64_sys_write|__x64_sys_read|"
		    "__arm64_sys_write|__arm64_sys_read)$",
	  .depth = 40, .exclude = "^(tcp_sendmsg|tcp_recvmsg|unix_stream_sendmsg)",
	  .min_share = 0.005, .removes = 0.8,
	  .explanation = "The code path makes a read or write system call per small piece of "
			 "data: each call crosses into the kernel (entry, file lookup, locking, "
			 "copy) for a few bytes, so the overhead dominates the work.",
	  .actions = { "Buffer the I/O in user space (stdio with a large setvbuf, bufio.Writer, "
		       "io.BufferedWriter) and write in large blocks",
		       "Batch with writev/readv or io_uring",
		       "Avoid flushing after every record" } },
	{ .id = "kernel-network", .title = "Kernel network stack cost", .category = "network",
	  .kinds = ON,
	  .anchor = "^(tcp_sendmsg\\w*|tcp_recvmsg\\w*|tcp_write_xmit|__tcp_transmit_skb|"
		    "tcp_push|ip_output|ip_finish_output2?|__ip_queue_xmit|__dev_queue_xmit|"
		    "dev_hard_start_xmit|__netif_receive_skb\\w*|net_rx_action|tcp_v4_rcv|tcp_v6_rcv|"
		    "tcp_ack|tcp_rcv_established|skb_copy_datagram_iter|__skb_datagram_iter|"
		    "sock_sendmsg|sock_recvmsg|__sys_sendto|__sys_recvfrom|__sys_sendmsg|udp_sendmsg|"
		    "udpv6_sendmsg|inet_sendmsg|loopback_xmit|__x64_sys_sendto|__x64_sys_recvfrom|"
		    "unix_stream_sendmsg|unix_stream_recvmsg)$",
	  .anchor_types = T(KERNEL), .depth = 40, .min_share = 0.005, .removes = 0.4,
	  .explanation = "The kernel's network stack (TCP/IP processing, socket copies, "
			 "loopback) takes a large share of CPU, usually from many small messages.",
	  .actions = { "Send fewer, larger messages: batch, coalesce writes (writev, MSG_MORE, "
		       "TCP_CORK), enable pipelining",
		       "Use sendmmsg/recvmmsg or io_uring for UDP; enable GSO/GRO",
		       "For same-host traffic, use Unix domain sockets or shared memory" } },
	{ .id = "page-faults", .title = "Page faults", .category = "memory", .kinds = ON,
	  .anchor = "^(asm_exc_page_fault|exc_page_fault|do_user_addr_fault|handle_mm_fault|"
		    "__handle_mm_fault|do_anonymous_page|clear_page_erms|clear_page_rep|clear_page\\w*|"
		    "do_huge_pmd_anonymous_page|filemap_fault|do_fault|do_read_fault|"
		    "alloc_anon_folio|vma_alloc_folio\\w*|do_wp_page|wp_page_copy)$",
	  .anchor_types = T(KERNEL), .depth = 24, .min_share = 0.005, .removes = 0.6,
	  .explanation = "The process keeps touching fresh memory: every first touch of a page "
			 "faults into the kernel, which allocates and zeroes it. Typical of "
			 "buffers allocated and released per request (large malloc via mmap).",
	  .actions = { "Reuse large buffers instead of allocating them per request",
		       "Raise glibc's mmap threshold (M_MMAP_THRESHOLD / M_TRIM_THRESHOLD) or use "
		       "jemalloc/mimalloc so freed memory is kept",
		       "Use transparent huge pages or MAP_POPULATE for large long-lived buffers" } },
	{ .id = "mmap-churn", .title = "Memory mapped and unmapped repeatedly", .category = "memory",
	  .kinds = ON,
	  .anchor = "^(__x64_sys_munmap|__x64_sys_mmap|__arm64_sys_munmap|__arm64_sys_mmap|"
		    "__vm_munmap|do_vmi_munmap|do_vmi_align_munmap|unmap_region|zap_pte_range|"
		    "unmap_page_range|do_mmap|vm_mmap_pgoff|__x64_sys_madvise|do_madvise\\w*|"
		    "__x64_sys_brk|tlb_finish_mmu|munmap|mmap64|__mmap|__munmap)$",
	  .depth = 24, .min_share = 0.005, .removes = 0.8,
	  .explanation = "Memory is mapped and unmapped (or trimmed with madvise/brk) again and "
			 "again: large allocations freed per request return to the kernel.",
	  .actions = { "Keep large buffers alive and reuse them",
		       "Raise M_MMAP_THRESHOLD/M_TRIM_THRESHOLD or use jemalloc/mimalloc" } },
	{ .id = "spin-yield", .title = "Spin-waiting with sched_yield", .category = "locking",
	  .kinds = ON,
	  .anchor = "^(sched_yield|__sched_yield|__x64_sys_sched_yield|do_sched_yield|"
		    "runtime\\.osyield|runtime\\.procyield|std::this_thread::yield|"
		    "__arm64_sys_sched_yield)$",
	  .depth = 12, .min_share = 0.005, .removes = 0.8,
	  .explanation = "Threads busy-wait by calling sched_yield in a loop: they burn CPU "
			 "while waiting for work or a lock.",
	  .actions = { "Block on a condition variable, futex or eventfd instead of yielding",
		       "Bound spinning to a few iterations before blocking" } },
	{ .id = "timer-churn", .title = "Frequent short sleeps and timers", .category = "syscalls",
	  .kinds = ON,
	  .anchor = "^(nanosleep|__nanosleep|clock_nanosleep|__clock_nanosleep\\w*|usleep|"
		    "__x64_sys_nanosleep|__x64_sys_clock_nanosleep|hrtimer_nanosleep|"
		    "do_nanosleep|time\\.Sleep|runtime\\.usleep|hrtimer_start_range_ns)$",
	  .depth = 12, .min_share = 0.005, .removes = 0.6,
	  .explanation = "A loop sleeps for very short intervals (polling): each sleep is two "
			 "context switches and a timer, costing CPU without doing work.",
	  .actions = { "Wait on the event itself (condition variable, epoll, channel) instead of "
		       "polling with sleeps",
		       "Lengthen the polling interval or batch the work per wake-up" } },
	{ .id = "busy-poll", .title = "Event loop polling with zero timeouts", .category = "syscalls",
	  .kinds = ON,
	  .anchor = "^(ep_poll|do_epoll_wait|__x64_sys_epoll_wait|__x64_sys_epoll_pwait|"
		    "do_sys_poll|__x64_sys_poll|__x64_sys_ppoll|do_select|__x64_sys_select|"
		    "__x64_sys_pselect6|ep_send_events|epoll_wait|__epoll_wait\\w*|poll|__poll|select)$",
	  .depth = 12, .min_share = 0.005, .removes = 0.6,
	  .explanation = "CPU goes to epoll/poll/select calls themselves: an event loop polls with "
			 "a zero or tiny timeout, or watches many descriptors per call.",
	  .actions = { "Block in epoll_wait with a real timeout instead of spinning",
		       "Keep the watched set in epoll rather than rebuilding poll/select arrays per "
		       "call" } },
	{ .id = "vdso-time", .title = "Reading the clock in a hot loop", .category = "syscalls",
	  .kinds = ON,
	  .anchor = "^(clock_gettime|__clock_gettime\\w*|__vdso_clock_gettime|gettimeofday|"
		    "__gettimeofday|__x64_sys_clock_gettime|__x64_sys_gettimeofday|"
		    "read_hpet|read_tsc|do_clock_gettime|runtime\\.nanotime1?|runtime\\.walltime|"
		    "time\\.now|time\\.Now)$",
	  .depth = 4, .min_share = 0.005, .removes = 0.7,
	  .explanation = "Timestamps are read on every iteration; on hosts whose clock source is "
			 "not the TSC (some VMs: hpet, xen) each read is a system call.",
	  .actions = { "Read the clock once per batch, or use a coarse clock "
		       "(CLOCK_MONOTONIC_COARSE)",
		       "On VMs, check /sys/devices/system/clocksource/*/current_clocksource is tsc" } },
	{ .id = "exceptions", .title = "Exceptions used for control flow", .category = "runtime",
	  .kinds = ON,
	  .anchor = "^(__cxa_throw|_Unwind_RaiseException|_Unwind_Find_FDE|__gxx_personality_v0|"
		    "_Unwind_GetIPInfo|uw_frame_state_for|uw_update_context_1|execute_cfa_program|"
		    "dl_iterate_phdr|_Unwind_IteratePhdrCallback|runtime\\.gopanic|"
		    "runtime\\.gorecover|_PyErr_SetObject|PyErr_SetObject|_PyErr_Restore|"
		    "PyErr_NormalizeException)$",
	  .depth = 8, .min_share = 0.005, .removes = 0.9,
	  .explanation = "Throwing and unwinding exceptions takes a large share of CPU: unwinding "
			 "walks the stack through the unwind tables (and the loader's lock), "
			 "costing microseconds per throw.",
	  .actions = { "Return error codes / optionals on expected failures instead of throwing",
		       "Check preconditions before calling code that throws" } },
	{ .id = "dynamic-symbol-lookup", .title = "Dynamic symbol lookups in a hot path",
	  .category = "runtime", .kinds = ON,
	  .anchor = "^(_dl_lookup_symbol_x|do_lookup_x|_dl_fixup|dlsym|__dlsym|_dl_sym|"
		    "_dl_runtime_resolve\\w*|check_match|dl_new_hash|_dl_name_match_p)$",
	  .depth = 6, .min_share = 0.005, .removes = 0.95,
	  .explanation = "The dynamic loader resolves symbols repeatedly (dlsym per call, or lazy "
			 "binding in short-lived processes).",
	  .actions = { "Call dlsym once and keep the pointer",
		       "Link with -Wl,-z,now (or LD_BIND_NOW) for short-lived processes" } },
	{ .id = "logging-format", .title = "Logging and string formatting", .category = "logging",
	  .kinds = ON,
	  .anchor = "^(__vfprintf_internal|vfprintf|_IO_vfprintf|__printf_fp\\w*|__vsnprintf_internal|"
		    "vsnprintf|__vsprintf_internal|printf_positional|__printf_buffer\\w*|"
		    "_IO_default_xsputn|__GI__IO_default_xsputn|_itoa_word|"
		    "fmt\\.\\(\\*pp\\)\\.\\w+|fmt\\.Sprintf|fmt\\.Fprintf|fmt\\.Sprint\\w*|"
		    "fmt\\.\\(\\*fmt\\)\\.\\w+|log\\.\\(\\*Logger\\)\\.\\w+|log/slog\\.\\w+|"
		    "std::__ostream_insert.*|std::ostream::_M_insert.*|std::basic_ostream.*|"
		    "spdlog::.*|fmt::v\\d+::.*|Logger\\._log|Logger\\.handle|Formatter\\.format|"
		    "LogRecord\\.getMessage|Handler\\.emit|StreamHandler\\.emit|Logger\\.info|Logger\\.debug)$",
	  .depth = 10, .min_share = 0.005, .removes = 0.7,
	  .explanation = "Formatting strings (printf-family, fmt.Sprintf, iostreams, logging "
			 "frameworks) takes a large share of CPU, often for log lines below the "
			 "active level or built and then discarded.",
	  .actions = { "Check the log level before formatting; log lazily (logger.debug(\"%s\", x))",
		       "Lower the volume: sample or aggregate repeated log lines",
		       "Use structured logging with pre-allocated encoders (zap, zerolog, spdlog)" } },
	{ .id = "go-scheduler", .title = "Goroutine scheduling overhead", .category = "runtime",
	  .kinds = ON,
	  .anchor = "^runtime\\.(schedule|findRunnable|findrunnable|stealWork|runqsteal|runqgrab|"
		    "futexwakeup|notewakeup|wakep|startm|stopm|park_m|goready|ready|selectgo|"
		    "chansend|chanrecv|lock2|unlock2|netpollbreak)$",
	  .depth = 6, .min_share = 0.005, .removes = 0.5,
	  .explanation = "The Go runtime spends CPU handing work between goroutines: many "
			 "goroutines waking for tiny units of work over channels.",
	  .actions = { "Batch work per channel message; use buffered channels",
		       "Use a fixed worker pool instead of a goroutine per item",
		       "Set GOMAXPROCS to the container's CPU limit (automaxprocs)" } },
	{ .id = "python-interpreter", .title = "Pure-Python hot loop (interpreter overhead)",
	  .category = "interpreter", .kinds = ON, .anchor = ".", .anchor_types = T(CPYTHON),
	  .depth = 1, .exclude = "^(_?compile|_parse|_code)$", .min_share = 0.005, .removes = 0.8,
	  .explanation = "CPU time is spent executing Python bytecode of this function itself "
			 "(its own lines, not native library code): the interpreter's dispatch "
			 "and boxed values cost 10-100x of the equivalent compiled code.",
	  .actions = { "Vectorize with NumPy, or compile the function with Numba or Cython",
		       "Hoist invariant work and attribute lookups out of the loop",
		       "Use built-ins and comprehensions, which run their loop in C" } },
	{ .id = "malloc-free", .title = "Allocator pressure (malloc/free)", .category = "allocation",
	  .kinds = ON,
	  .anchor = "^(malloc|free|calloc|realloc|cfree|_int_malloc|_int_free|_int_free_merge_chunk|"
		    "_int_realloc|malloc_consolidate|unlink_chunk|__libc_malloc|__libc_free|"
		    "__libc_calloc|__libc_realloc|tcache_get|tcache_put|__GI___libc_malloc|"
		    "__GI___libc_free|sysmalloc|operator new|operator delete|operator new\\[\\]|"
		    "operator delete\\[\\]|je_malloc|je_free|tc_malloc|tc_free|mi_malloc|mi_free|"
		    "arena_get2|_int_free_chunk|_int_malloc_\\w+)(\\(.*\\))?$",
	  .depth = 4, .min_share = 0.005, .removes = 0.6,
	  .explanation = "Allocating and freeing memory takes a large share of CPU: many small, "
			 "short-lived allocations in a hot path, or a general-purpose allocator "
			 "contended across threads.",
	  .actions = { "Reuse buffers and objects across iterations instead of allocating per call "
		       "(pools, arenas, stack buffers)",
		       "Link a faster allocator (jemalloc, mimalloc, tcmalloc) via LD_PRELOAD",
		       "Reserve container capacity up front (vector::reserve)" } },
	{ .id = "memcpy", .title = "Memory copying (memcpy/memmove)", .category = "memory",
	  .kinds = ON,
	  .anchor = "^(memcpy|memmove|__memcpy\\w*|__memmove\\w*|__mempcpy\\w*|mempcpy|"
		    "__memcpy_avx_unaligned_erms|copy_user_enhanced_fast_string|copy_user_generic\\w*|"
		    "rep_movs_alternative|_copy_to_user|_copy_from_user|runtime\\.memmove|"
		    "std::__copy_move\\w*|__nss_database_lookup)$",
	  .depth = 3, .min_share = 0.005, .removes = 0.5,
	  .explanation = "Copying memory takes a large share of CPU: data is copied between "
			 "buffers (or between user space and the kernel) more often than needed.",
	  .actions = { "Pass buffers by reference/view (std::string_view, slices, memoryview) "
		       "instead of copying",
		       "Read directly into the final buffer; use larger reads or zero-copy I/O "
		       "(sendfile, splice, io_uring)",
		       "Avoid growing buffers by repeated realloc-and-copy: reserve once" } },
	/* --- locks and waiting ----------------------------------------------- */
};

const size_t pat_count = ARRAY_SIZE(pat_table);

/* --- matching -------------------------------------------------------------- */

/* The compiled expressions of the table, compiled once (pthread_once) and
 * only read afterwards: shared by every query thread. */
enum { RE_ANCHOR, RE_CALLER, RE_EXCLUDE, RE_BINARY, RE_N };
static pcre2_code *compiled[sizeof(pat_table) / sizeof(pat_table[0])][RE_N];
static int compile_failed;
static pthread_once_t compile_once = PTHREAD_ONCE_INIT;

static pcre2_code *compile(const char *src)
{
	if (!src)
		return NULL;
	int ec;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &off, NULL);
	if (!re) {
		compile_failed = 1;
		return NULL;
	}
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
	return re;
}

static void compile_all(void)
{
	for (size_t i = 0; i < pat_count; i++) {
		const struct pattern *p = &pat_table[i];
		compiled[i][RE_ANCHOR] = compile(p->anchor);
		compiled[i][RE_CALLER] = compile(p->caller);
		compiled[i][RE_EXCLUDE] = compile(p->exclude);
		compiled[i][RE_BINARY] = compile(p->binary);
	}
}

int pat_selfcheck(void)
{
	pthread_once(&compile_once, compile_all);
	return compile_failed ? -1 : 0;
}

static bool re_match(const pcre2_code *re, pcre2_match_data *md, const char *s)
{
	if (!re || !s)
		return false;
	return pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL) >= 0;
}

static bool type_ok(unsigned mask, uint8_t type)
{
	return !mask || (type < 32 && (mask & (1u << type)));
}

bool pat_match_one(const struct pattern *p, uint8_t kind, const struct ht_trace *t,
		   struct pat_match *m)
{
	pthread_once(&compile_once, compile_all);
	size_t i = (size_t)(p - pat_table);
	if (i >= pat_count || !t->nframes || kind >= 32 || !(p->kinds & (1u << kind)))
		return false;
	pcre2_code *const *re = compiled[i];
	if (!re[RE_ANCHOR])
		return false;
	pcre2_match_data *md = pcre2_match_data_create(4, NULL);
	if (!md)
		return false;
	bool ok = false;
	if (re[RE_EXCLUDE])
		for (size_t f = 0; f < t->nframes; f++)
			if (re_match(re[RE_EXCLUDE], md, t->frames[f].name))
				goto out;
	size_t depth = p->depth ? p->depth : 1;
	/* The deepest anchor (nearest the leaf) within depth. */
	for (size_t k = 0; k < depth && k < t->nframes; k++) {
		size_t a = t->nframes - 1 - k;
		const struct ht_frame *f = &t->frames[a];
		if (!type_ok(p->anchor_types, f->type) || !re_match(re[RE_ANCHOR], md, f->name))
			continue;
		if (re[RE_BINARY] && !re_match(re[RE_BINARY], md, f->binary) &&
		    !re_match(re[RE_BINARY], md, f->file))
			continue;
		size_t caller = SIZE_MAX;
		if (re[RE_CALLER]) {
			for (size_t c = a; c-- > 0;)
				if (type_ok(p->caller_types, t->frames[c].type) &&
				    re_match(re[RE_CALLER], md, t->frames[c].name)) {
					caller = c;
					break;
				}
			if (caller == SIZE_MAX)
				continue;
		}
		m->p = p;
		m->anchor = a;
		m->caller = caller;
		ok = true;
		break;
	}
out:
	pcre2_match_data_free(md);
	return ok;
}

bool pat_match(uint8_t kind, const struct ht_trace *t, struct pat_match *m,
	       const struct pattern **alsov, size_t nalso, size_t *also)
{
	bool found = false;
	size_t n = 0;
	for (size_t i = 0; i < pat_count; i++) {
		struct pat_match x;
		if (!pat_match_one(&pat_table[i], kind, t, &x))
			continue;
		if (!found) {
			*m = x;
			found = true;
		} else {
			if (n < nalso && alsov)
				alsov[n] = &pat_table[i];
			n++;
		}
	}
	if (also)
		*also = n;
	return found;
}

const struct pattern *pat_find(const char *id)
{
	for (size_t i = 0; i < pat_count; i++)
		if (strcmp(pat_table[i].id, id) == 0)
			return &pat_table[i];
	return NULL;
}
