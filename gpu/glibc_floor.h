/* glibc_floor.h - keeps libembercuda.so loadable by programs built for an
 * older glibc than the build host's. Included first by every gpu/ source.
 *
 * The library is injected into other people's programs and containers
 * (Ubuntu 20.04 has glibc 2.31, RHEL 8 2.28, manylinux2014 2.17). Built on
 * Debian 12, it would reference dlopen, dlsym, pthread_create & co. at
 * GLIBC_2.34 (the version they got when they moved into libc) and refuse
 * to load there. Binding them to their original x86-64 versions, which
 * every glibc still provides (in libdl/libpthread before 2.34, which the
 * library therefore names as needed: the Makefile links -ldl -lpthread
 * with --no-as-needed), keeps the floor at 2.17 (clock_gettime).
 * tests/integration/test_cuda_lib.py checks the floor. */
#ifndef EMBER_GPU_GLIBC_FLOOR_H
#define EMBER_GPU_GLIBC_FLOOR_H

#if defined(__x86_64__) && defined(__GLIBC__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
#endif

#endif
