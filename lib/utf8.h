/*
 * UTF-8 by bytes: validity, character counts, and cuts that never fall
 * inside a character.
 */
#ifndef FLEET_UTF8_H
#define FLEET_UTF8_H

#include <stddef.h>

int	 utf8_valid(const char *, size_t);
size_t	 utf8_chars(const char *, size_t);
size_t	 utf8_prefix(const char *, size_t, size_t, size_t *);
size_t	 utf8_floor(const char *, size_t);
size_t	 utf8_ceil(const char *, size_t, size_t);
size_t	 utf8_strlcpy(char *, const char *, size_t);

#endif
