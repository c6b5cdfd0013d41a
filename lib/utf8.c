/*
 * UTF-8 by bytes.  Only utf8_valid() checks the encoding; the others
 * assume it and just keep to character boundaries.
 */
#include <sys/types.h>

#include <string.h>

#include "utf8.h"

/* A continuation byte: never the first byte of a character. */
static int
cont(char c)
{
	return ((unsigned char)c & 0xc0) == 0x80;
}

/* Well-formed UTF-8 (no overlongs, surrogates or NULs). */
int
utf8_valid(const char *s, size_t len)
{
	const unsigned char	*p = (const unsigned char *)s;
	size_t			 i = 0, n, k;
	unsigned int		 cp;

	while (i < len) {
		if (p[i] == 0)
			return 0;
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		if (p[i] >= 0xc2 && p[i] <= 0xdf) {
			n = 1;
			cp = p[i] & 0x1f;
		} else if (p[i] >= 0xe0 && p[i] <= 0xef) {
			n = 2;
			cp = p[i] & 0x0f;
		} else if (p[i] >= 0xf0 && p[i] <= 0xf4) {
			n = 3;
			cp = p[i] & 0x07;
		} else
			return 0;
		if (i + n >= len)
			return 0;
		for (k = 1; k <= n; k++) {
			if (!cont((char)p[i + k]))
				return 0;
			cp = (cp << 6) | (p[i + k] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		i += n + 1;
	}
	return 1;
}

/*
 * Byte length of the first nchars characters of s (at most len bytes);
 * the number of characters counted goes to *got.
 */
size_t
utf8_prefix(const char *s, size_t len, size_t nchars, size_t *got)
{
	size_t	 i = 0, n = 0;

	while (i < len && n < nchars) {
		i++;
		while (i < len && cont(s[i]))
			i++;
		n++;
	}
	if (got != NULL)
		*got = n;
	return i;
}

size_t
utf8_chars(const char *s, size_t len)
{
	size_t	 n;

	utf8_prefix(s, len, len, &n);
	return n;
}

/* Step back from n to the start of the character holding byte n. */
size_t
utf8_floor(const char *s, size_t n)
{
	while (n > 0 && cont(s[n]))
		n--;
	return n;
}

/* Step forward from n to the start of the next character (or len). */
size_t
utf8_ceil(const char *s, size_t len, size_t n)
{
	while (n < len && cont(s[n]))
		n++;
	return n;
}

/* strlcpy whose truncated copy ends on a character boundary. */
size_t
utf8_strlcpy(char *dst, const char *src, size_t size)
{
	size_t	 len = strlen(src), n;

	if (size == 0)
		return len;
	n = len < size ? len : utf8_floor(src, size - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
	return len;
}
