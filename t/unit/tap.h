/*
 * A minimal TAP producer for the C unit tests: prove runs the binaries.
 */
#ifndef FLEET_TAP_H
#define FLEET_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int	tap_n;
static int	tap_failed;

static int	ok(int, const char *, ...) __attribute__((format(printf, 2, 3)));

static int
ok(int cond, const char *fmt, ...)
{
	va_list	 ap;

	printf("%sok %d - ", cond ? "" : "not ", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond)
		tap_failed++;
	fflush(stdout);
	return cond;
}

#define is_int(a, b, ...) do {						\
	long long _a = (a), _b = (b);					\
	if (!ok(_a == _b, __VA_ARGS__))					\
		printf("#   got %lld, expected %lld\n", _a, _b);	\
} while (0)

#define is_str(a, b, ...) do {						\
	const char *_a = (a), *_b = (b);				\
	if (!ok(_a != NULL && _b != NULL && strcmp(_a, _b) == 0,	\
	    __VA_ARGS__))						\
		printf("#   got '%s', expected '%s'\n",		\
		    _a ? _a : "(null)", _b ? _b : "(null)");		\
} while (0)

#define like(a, b, ...) do {						\
	const char *_a = (a), *_b = (b);				\
	if (!ok(_a != NULL && strstr(_a, _b) != NULL, __VA_ARGS__))	\
		printf("#   '%s' does not contain '%s'\n",		\
		    _a ? _a : "(null)", _b);				\
} while (0)

static int
done_testing(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#endif
