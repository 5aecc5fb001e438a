/* cuda_blob.S - the bytes of libembercuda.so (built from gpu/) inside
 * ember-agent, which installs them at start (agent/cudaship.h). The
 * Makefile assembles it with -I build/lib. */
	.section .rodata.embercuda, "a"
	.balign 64
	.globl ember_cuda_lib_start
	.type ember_cuda_lib_start, @object
ember_cuda_lib_start:
	.incbin "libembercuda.so"
	.globl ember_cuda_lib_end
	.type ember_cuda_lib_end, @object
ember_cuda_lib_end:
	.section .note.GNU-stack, "", @progbits
