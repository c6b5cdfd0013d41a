/*
 * lib/util.c: truncation that keeps UTF-8 whole.
 */
#include <sys/types.h>

#include <string.h>

#include <jansson.h>

#include "lib/util.h"
#include "tap.h"

int
main(void)
{
	char	 buf[8];
	json_t	*j;

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
