/* cuda.h - the project's stand-in for NVIDIA's cuda.h, so that the CUPTI
 * headers of Debian's libcupti-dev (scripts/fetch-cuda-headers.sh) compile
 * without the CUDA toolkit. It declares only what those headers name: the
 * driver's handle types, kept opaque, and the few enums and structs they
 * use by name. libembercuda.so never links libcuda; the driver functions
 * it calls are looked up with dlsym and declared in gpu/embercuda.c with
 * the driver API's documented signatures.
 */
#ifndef EMBER_CUDA_MIN_H
#define EMBER_CUDA_MIN_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;               /* 0 is CUDA_SUCCESS */
typedef int CUdevice;               /* a device ordinal */
typedef int CUdevice_attribute;
typedef int CUgraphNodeType;
typedef unsigned long long CUdeviceptr;

typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmod_st *CUmodule;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUaccessPolicyWindow_st CUaccessPolicyWindow;

typedef struct CUuuid_st {
	char bytes[16];
} CUuuid;

#define CUDA_SUCCESS 0

#endif
