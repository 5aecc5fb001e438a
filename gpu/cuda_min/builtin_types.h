/* builtin_types.h - empty stand-in for the CUDA toolkit's header of the
 * same name, which cupti_callbacks.h includes but whose types nothing in
 * gpu/ uses (see gpu/cuda_min/cuda.h). */
#ifndef EMBER_CUDA_MIN_BUILTIN_TYPES_H
#define EMBER_CUDA_MIN_BUILTIN_TYPES_H
#endif
