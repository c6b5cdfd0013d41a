/*
 * lib/utf8.c: validity, counts, and cuts that keep characters whole.
 */
#include <sys/types.h>

#include <string.h>

#include <jansson.h>

#include "lib/utf8.h"
#include "tap.h"

int
main(void)
{
	char	 buf[8];
	json_t	*j;
	size_t	 got;

	is_int(utf8_valid("a\xe2\x82\xac", 4), 1, "valid UTF-8");
	is_int(utf8_valid("a\xe2\x82", 3), 0, "truncated sequence");
	is_int(utf8_valid("\xed\xa0\x80", 3), 0, "surrogate");
	is_int(utf8_valid("\xf4\x90\x80\x80", 4), 0, "beyond U+10FFFF");
	is_int(utf8_valid("a\0b", 3), 0, "NUL");
	is_int((int)utf8_prefix("a\xe2\x82\xac" "b", 5, 2, &got), 4,
	    "prefix of two characters");
	is_int((int)got, 2, "counts two");
	is_int((int)utf8_prefix("ab", 2, 5, &got), 2, "shorter than the limit");
	is_int((int)got, 2, "counts what there is");
	is_int((int)utf8_prefix("ab", 2, 0, NULL), 0, "zero characters");
	is_int((int)utf8_chars("a\xe2\x82\xac\xf0\x9f\x98\x80", 8), 3,
	    "characters of 1, 3 and 4 bytes");
	is_int((int)utf8_floor("a\xe2\x82\xac", 2), 1,
	    "floor steps back to the character's first byte");
	is_int((int)utf8_ceil("a\xe2\x82\xac" "b", 5, 2), 4,
	    "ceil steps on to the next character");
	is_int((int)utf8_ceil("a\xe2\x82\xac", 4, 2), 4, "or to the end");

	/* The seventh byte starts a 2-byte character: it does not fit. */
	is_int(utf8_strlcpy(buf, "abcdef\xc3\xb1", sizeof(buf)), 8,
	    "returns the source length");
	is_str(buf, "abcdef", "a cut inside a character backs off");
	utf8_strlcpy(buf, "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac", sizeof(buf));
	is_str(buf, "\xe2\x82\xac\xe2\x82\xac", "3-byte characters: two fit");
	utf8_strlcpy(buf, "\xf0\x9f\x98\x80\xf0\x9f\x98\x80", sizeof(buf));
	is_str(buf, "\xf0\x9f\x98\x80", "4-byte characters: one fits");
	ok((j = json_string(buf)) != NULL, "the cut is valid UTF-8 for JSON");
	json_decref(j);
	utf8_strlcpy(buf, "short", sizeof(buf));
	is_str(buf, "short", "a string that fits is copied whole");
	utf8_strlcpy(buf, "exactly", sizeof(buf));
	is_str(buf, "exactly", "seven bytes fit in eight");
	utf8_strlcpy(buf, "abcdefghij", sizeof(buf));
	is_str(buf, "abcdefg", "ASCII is cut at the size");
	utf8_strlcpy(buf, "\xe2\x82\xac", 2);
	is_str(buf, "", "no room for one character: empty");
	return done_testing();
}
