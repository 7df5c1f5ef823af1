/* embed.h: a file's bytes built into a program, NUL-terminated, so that an
 * installed program needs no data path. EMBED(symbol, "path") stands
 * where a declaration may; path is from the top of the source tree, and
 * the Makefile makes the object depend on the file. Declare the symbol as
 * extern const char symbol[] where it is used. */
#ifndef IDEM_EMBED_H
#define IDEM_EMBED_H

#define EMBED(symbol, file)                                           \
	__asm__(".section .rodata\n"                                  \
		".global " #symbol "\n"                               \
		".type " #symbol ", @object\n"                        \
		#symbol ":\n"                                         \
		".incbin \"" file "\"\n"                              \
		".byte 0\n"                                           \
		".previous\n")

#endif
