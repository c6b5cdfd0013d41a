/*
 * gateway/multipart.c: boundaries, well-formed bodies, and every way a
 * body can be malformed; plus the attachment filename rules and the
 * UTF-8 and UUID helpers of gateway/api.c.
 */
#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/api.h"
#include "tap.h"

#define PARTS_MAX	80

struct got {
	int	 n;
	char	 name[PARTS_MAX][MP_NAME_MAX + 1];
	char	*filename[PARTS_MAX];
	char	*ctype[PARTS_MAX];
	char	*data[PARTS_MAX];
	size_t	 len[PARTS_MAX];
	int	 stop_at;		/* return 7 at this part (1-based) */
};

static int
collect(const struct mp_part *p, void *arg)
{
	struct got	*g = arg;
	int		 i = g->n++;

	if (i >= PARTS_MAX)
		return (0);
	memcpy(g->name[i], p->name, sizeof(g->name[i]));
	g->filename[i] = p->filename ? strdup(p->filename) : NULL;
	g->ctype[i] = p->content_type ? strdup(p->content_type) : NULL;
	g->data[i] = malloc(p->len + 1);
	memcpy(g->data[i], p->data, p->len);
	g->data[i][p->len] = '\0';
	g->len[i] = p->len;
	return (g->stop_at == g->n ? 7 : 0);
}

static void
got_free(struct got *g)
{
	int	 i;

	for (i = 0; i < g->n && i < PARTS_MAX; i++) {
		free(g->filename[i]);
		free(g->ctype[i]);
		free(g->data[i]);
	}
	memset(g, 0, sizeof(*g));
}

static int
parse(const char *body, size_t len, struct got *g, const char **why)
{
	memset(g, 0, sizeof(*g));
	*why = NULL;
	return (mp_parse(body, len, "XyZ", collect, g, why));
}

static int
parse_str(const char *body, struct got *g, const char **why)
{
	return (parse(body, strlen(body), g, why));
}

/* A body that must be refused. */
static void
bad(const char *body, const char *what)
{
	struct got	 g;
	const char	*why;
	int		 rc;

	rc = parse_str(body, &g, &why);
	ok(rc == -1 && why != NULL, "refused: %s (%s)", what,
	    why ? why : "accepted");
	got_free(&g);
}

static void
test_boundary(void)
{
	char	 b[MP_BOUNDARY_MAX + 1], ct[256];
	int	 rc;

	is_int(mp_boundary("multipart/form-data; boundary=abc", b, sizeof(b)),
	    0, "boundary token");
	is_str(b, "abc", "boundary value");
	is_int(mp_boundary("Multipart/Form-Data;BOUNDARY=\"a b:c\"", b,
	    sizeof(b)), 0, "quoted boundary, any case, no space");
	is_str(b, "a b:c", "quoted boundary value");
	is_int(mp_boundary("multipart/form-data; charset=utf-8; "
	    "boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW", b, sizeof(b)), 0,
	    "browser boundary after another parameter");
	is_str(b, "----WebKitFormBoundary7MA4YWxkTrZu0gW", "its value");
	is_int(mp_boundary(NULL, b, sizeof(b)), -1, "no content type");
	is_int(mp_boundary("text/plain", b, sizeof(b)), -1, "not multipart");
	is_int(mp_boundary("multipart/mixed; boundary=x", b, sizeof(b)), -1,
	    "multipart/mixed");
	is_int(mp_boundary("multipart/form-data", b, sizeof(b)), -1,
	    "no boundary");
	is_int(mp_boundary("multipart/form-data; boundary=\"\"", b,
	    sizeof(b)), -1, "empty boundary");
	is_int(mp_boundary("multipart/form-data; boundary=\"ab \"", b,
	    sizeof(b)), -1, "boundary ending in a space");
	is_int(mp_boundary("multipart/form-data; boundary=\"a@b\"", b,
	    sizeof(b)), -1, "boundary with a non-bchar");
	is_int(mp_boundary("multipart/form-data; boundary=a; boundary=b", b,
	    sizeof(b)), -1, "two boundaries");
	is_int(mp_boundary("multipart/form-data; boundary=a;", b, sizeof(b)),
	    -1, "trailing semicolon");
	is_int(mp_boundary("multipart/form-data; boundary=\"abc", b,
	    sizeof(b)), -1, "unterminated quoted boundary");
	is_int(mp_boundary("multipart/form-data boundary=abc", b, sizeof(b)),
	    -1, "missing semicolon");
	snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%070d", 7);
	is_int(mp_boundary(ct, b, sizeof(b)), 0, "70-character boundary");
	is_int((int)strlen(b), 70, "kept whole");
	snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%071d", 7);
	rc = mp_boundary(ct, b, sizeof(b));
	is_int(rc, -1, "71-character boundary");
}

static void
test_good(void)
{
	struct got	 g;
	const char	*why;
	static const char bin[] = "--XyZ\r\n"
	    "Content-Disposition: form-data; name=\"attachment\"; "
	    "filename=\"b.bin\"\r\n\r\n"
	    "\0\r\n-XyZ\r\n-\r--XyZ\n\0"
	    "\r\n--XyZ--\r\n";
	static const char bindata[] = "\0\r\n-XyZ\r\n-\r--XyZ\n\0";
	static const char three[] = "--XyZ\r\n"
	    "Content-Disposition: form-data; name=a\r\n\r\n1\r\n--XyZ\r\n"
	    "Content-Disposition: form-data; name=b\r\n\r\n2\r\n--XyZ\r\n"
	    "Content-Disposition: form-data; name=c\r\n\r\n3\r\n--XyZ--";
	char		*big;
	size_t		 n;

	is_int(parse_str("--XyZ\r\n"
	    "Content-Disposition: form-data; name=\"attachment\"; "
	    "filename=\"hello.txt\"\r\n"
	    "Content-Type: text/plain; charset=utf-8\r\n"
	    "\r\n"
	    "hello\r\nworld\r\n"
	    "--XyZ--\r\n", &g, &why), 0, "one file part");
	is_int(g.n, 1, "one part seen");
	is_str(g.name[0], "attachment", "its name");
	is_str(g.filename[0], "hello.txt", "its filename");
	is_str(g.ctype[0], "text/plain; charset=utf-8", "its content type");
	is_str(g.data[0], "hello\r\nworld", "its data, inner CRLF kept");
	got_free(&g);

	is_int(parse_str("preamble\r\nmore\r\n--XyZ\r\n"
	    "content-disposition: FORM-DATA; NAME=a\r\n\r\n1\r\n"
	    "--XyZ   \t\r\n"
	    "Content-Disposition: form-data; name=\"b\"; filename=\"\"\r\n"
	    "X-Other: ignored\r\n\r\n"
	    "\r\n"
	    "--XyZ\r\n"
	    "Content-Disposition: form-data; name=\"c\"\r\n\r\n"
	    "\r\n--XyZ--epilogue\r\nanything", &g, &why), 0,
	    "preamble, padding, epilogue, three parts");
	is_int(g.n, 3, "three parts");
	is_str(g.name[0], "a", "token name, headers in any case");
	ok(g.filename[0] == NULL, "no filename parameter: NULL");
	ok(g.ctype[0] == NULL, "no content type: NULL");
	is_str(g.data[0], "1", "first data");
	is_str(g.filename[1], "", "empty filename kept empty");
	is_int((int)g.len[1], 0, "empty data");
	is_int((int)g.len[2], 0, "third part empty too");
	got_free(&g);

	is_int(parse(bin, sizeof(bin) - 1, &g, &why), 0, "binary data");
	is_int((int)g.len[0], (int)sizeof(bindata) - 1,
	    "NULs and near-boundaries are data");
	ok(g.n == 1 && memcmp(g.data[0], bindata, sizeof(bindata) - 1) == 0,
	    "data exact");
	got_free(&g);

	is_int(parse_str("--XyZ--\r\n", &g, &why), 0, "no parts at all");
	is_int(g.n, 0, "none seen");
	got_free(&g);

	is_int(parse_str("--XyZ\r\nContent-Disposition: form-data; "
	    "name=\"f\"; filename=\"a\\\"b\\\\c.txt\"\r\n\r\nx\r\n--XyZ--",
	    &g, &why), 0, "escaped quote and backslash");
	is_str(g.filename[0], "a\"b\\c.txt", "unescaped");
	got_free(&g);

	is_int(parse_str("--XyZ\r\nContent-Disposition: form-data; "
	    "name=\"f\"; filename=\"C:\\dir\\f.txt\"\r\n\r\nx\r\n--XyZ--",
	    &g, &why), 0, "Windows path");
	is_str(g.filename[0], "C:\\dir\\f.txt", "lone backslashes stay");
	got_free(&g);

	is_int(parse_str("--XyZ\r\nContent-Disposition: form-data; "
	    "name=\"f\"; filename=\"\xc3\xa9t\xc3\xa9.txt\"\r\n\r\nx\r\n"
	    "--XyZ--", &g, &why), 0, "UTF-8 filename");
	is_str(g.filename[0], "\xc3\xa9t\xc3\xa9.txt", "bytes kept");
	got_free(&g);

	g.stop_at = 2;
	is_int(mp_parse(three, sizeof(three) - 1, "XyZ", collect, &g, &why), 7,
	    "callback's value stops the parse");
	is_int(g.n, 2, "after the second part");
	got_free(&g);

	/* A header block of exactly MP_HEADERS_MAX bytes passes. */
	n = MP_HEADERS_MAX;
	big = malloc(n + 64);
	strcpy(big, "--XyZ\r\nContent-Disposition: form-data; name=a\r\nX: ");
	memset(big + strlen(big), 'a', n - strlen(
	    "Content-Disposition: form-data; name=a\r\nX: ") - 2);
	big[7 + n - 2] = '\0';
	strcat(big, "\r\n\r\nd\r\n--XyZ--");
	is_int(parse_str(big, &g, &why), 0, "header block at the limit");
	got_free(&g);
	free(big);
}

static void
test_bad(void)
{
	char		*big, *many;
	size_t		 n;
	int		 i;

	bad("", "empty body");
	bad("no delimiter here", "no delimiter");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nx",
	    "no closing delimiter");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n"
	    "--XyZ", "delimiter at the end without --");
	bad("--XyZ\nContent-Disposition: form-data; name=a\n\nx\n--XyZ--",
	    "LF line endings");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a\n\r\nx\r\n"
	    "--XyZ--", "bare LF in a header");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a\rb\r\n\r\nx\r\n"
	    "--XyZ--", "bare CR in a header");
	bad("--XyZ junk\r\nContent-Disposition: form-data; name=a\r\n\r\nx"
	    "\r\n--XyZ--", "junk after a delimiter");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n"
	    "--XyZW\r\n\r\n--XyZ--", "boundary-like line in the data");
	bad("--XyZ\r\n\r\nx\r\n--XyZ--", "no headers");
	bad("--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--",
	    "no Content-Disposition");
	bad("--XyZ\r\nContent-Disposition: attachment; name=a\r\n\r\nx\r\n"
	    "--XyZ--", "disposition not form-data");
	bad("--XyZ\r\nContent-Disposition: form-data; filename=a\r\n\r\nx\r\n"
	    "--XyZ--", "no name");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a; name=b\r\n\r\n"
	    "x\r\n--XyZ--", "two names");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a\r\n"
	    "Content-Disposition: form-data; name=b\r\n\r\nx\r\n--XyZ--",
	    "two Content-Disposition headers");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a\r\n"
	    "Content-Type: text/plain\r\nContent-Type: text/html\r\n\r\nx\r\n"
	    "--XyZ--", "two Content-Type headers");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a\r\n"
	    "Content-Type: multipart/mixed; boundary=q\r\n\r\n"
	    "--q\r\n\r\nx\r\n--q--\r\n--XyZ--", "nested multipart");
	bad("--XyZ\r\nContent-Disposition: form-data;\r\n name=a\r\n\r\nx\r\n"
	    "--XyZ--", "folded header");
	bad("--XyZ\r\nContent-Disposition form-data; name=a\r\n\r\nx\r\n"
	    "--XyZ--", "header without a colon");
	bad("--XyZ\r\n: form-data\r\n\r\nx\r\n--XyZ--", "empty header name");
	bad("--XyZ\r\nBad Name: v\r\nContent-Disposition: form-data; name=a"
	    "\r\n\r\nx\r\n--XyZ--", "space in a header name");
	bad("--XyZ\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n"
	    "--XyZ--", "unterminated quoted name");
	bad("--XyZ\r\nContent-Disposition: form-data; name=a\x01\r\n\r\nx\r\n"
	    "--XyZ--", "control character in a header");
	bad("--XyZ\r\nContent-Disposition: form-data; name=\r\n\r\nx\r\n"
	    "--XyZ--", "empty unquoted name");

	/* Header block one byte over the limit. */
	n = MP_HEADERS_MAX + 1;
	big = malloc(n + 64);
	strcpy(big, "--XyZ\r\nContent-Disposition: form-data; name=a\r\nX: ");
	memset(big + strlen(big), 'a', n - strlen(
	    "Content-Disposition: form-data; name=a\r\nX: ") - 2);
	big[7 + n - 2] = '\0';
	strcat(big, "\r\n\r\nd\r\n--XyZ--");
	bad(big, "header block over the limit");
	free(big);

	/* A header that never ends. */
	big = malloc(64 * 1024);
	strcpy(big, "--XyZ\r\nContent-Disposition: form-data; name=a\r\nX: ");
	memset(big + strlen(big), 'a', 60 * 1024);
	big[60 * 1024] = '\0';
	strcat(big, "\r\n\r\nd\r\n--XyZ--");
	bad(big, "unending header line");
	free(big);

	many = malloc((MP_PARTS_MAX + 1) * 64 + 16);
	many[0] = '\0';
	for (i = 0; i <= MP_PARTS_MAX; i++)
		strcat(many, "--XyZ\r\nContent-Disposition: form-data; name=a"
		    "\r\n\r\nx\r\n");
	strcat(many, "--XyZ--");
	bad(many, "too many parts");
	free(many);
}

static void
test_filename(void)
{
	char	 out[API_FILENAME_BUF];
	char	 in[2048];
	int	 i;

	is_int(api_filename_sanitize("report.pdf", out, sizeof(out)), 0,
	    "plain name");
	is_str(out, "report.pdf", "kept");
	is_int(api_filename_sanitize("../../etc/passwd", out, sizeof(out)), 0,
	    "path");
	is_str(out, "passwd", "last component");
	is_int(api_filename_sanitize("C:\\Users\\me\\a b.txt", out,
	    sizeof(out)), 0, "Windows path");
	is_str(out, "a b.txt", "last component, inner space kept");
	is_int(api_filename_sanitize("  a\tb\x7f.txt  ", out, sizeof(out)), 0,
	    "control characters and outer spaces");
	is_str(out, "ab.txt", "dropped");
	is_int(api_filename_sanitize("dir/", out, sizeof(out)), -1,
	    "trailing slash leaves nothing");
	is_int(api_filename_sanitize("..", out, sizeof(out)), -1, "..");
	is_int(api_filename_sanitize("a/.", out, sizeof(out)), -1, ".");
	is_int(api_filename_sanitize(" \t ", out, sizeof(out)), -1, "blank");
	is_int(api_filename_sanitize("a\xff.txt", out, sizeof(out)), -1,
	    "invalid UTF-8");
	is_int(api_filename_sanitize("\xc0\xaf.txt", out, sizeof(out)), -1,
	    "overlong UTF-8");
	in[0] = '\0';
	for (i = 0; i < 300; i++)
		strcat(in, "\xc3\xa9");
	is_int(api_filename_sanitize(in, out, sizeof(out)), 0, "long name");
	is_int((int)strlen(out), 255 * 2, "cut to 255 characters, whole ones");
}

static void
test_helpers(void)
{
	char	 id[API_UUID_LEN + 1];

	is_int(api_uuid("7793D159-223b-5feb-a99c-f7696debb478", 36, id), 0,
	    "UUID in mixed case");
	is_str(id, "7793d159-223b-5feb-a99c-f7696debb478", "lower-cased");
	is_int(api_uuid("7793d159223b5feba99cf7696debb478", 32, id), -1,
	    "UUID without hyphens");
	is_int(api_uuid("7793d159-223b-5feb-a99c-f7696debb47g", 36, id), -1,
	    "UUID with a non-hex digit");
	is_int(api_uuid("7793d159+223b-5feb-a99c-f7696debb478", 36, id), -1,
	    "UUID with a wrong separator");
}

/* The history mapping, compared as canonical JSON (and leak-checked). */
static void
test_turn_mapping(void)
{
	json_t	*in, *msg;
	char	*s;

	in = json_loads("{\"text\":\"hi\",\"attachment_ids\":[\"a1\",7]}",
	    0, NULL);
	msg = api_turn_user("u1", "s1", 3, in);
	s = json_dumps(msg, JSON_COMPACT | JSON_SORT_KEYS);
	is_str(s, "{\"id\":\"u1\",\"metadata\":{\"attachmentIds\":[\"a1\"],"
	    "\"schemaVersion\":1,\"sequence\":3,\"sessionId\":\"s1\"},"
	    "\"parts\":[{\"state\":\"done\",\"text\":\"hi\",\"type\":\"text\"},"
	    "{\"data\":{\"attachmentId\":\"a1\",\"phase\":\"selected\"},"
	    "\"type\":\"data-attachment\"}],\"role\":\"user\"}",
	    "user row; a non-string attachment id is dropped");
	free(s);
	json_decref(msg);
	json_decref(in);

	msg = api_turn_user("u2", "s1", 1, NULL);
	s = json_dumps(msg, JSON_COMPACT | JSON_SORT_KEYS);
	like(s, "\"attachmentIds\":[]", "unreadable input: no attachments");
	like(s, "\"text\":\"\"", "and empty text");
	free(s);
	json_decref(msg);

	in = json_loads("{\"schema_version\":1,\"trace_id\":\"t\",\"parts\":["
	    "{\"type\":\"tool_call\",\"tool_call_id\":\"c\",\"tool_name\":\"n\","
	    "\"input\":{\"q\":1},\"state\":\"completed\",\"output\":[2]},"
	    "{\"type\":\"tool_call\",\"tool_call_id\":\"d\",\"tool_name\":\"n\","
	    "\"state\":\"failed\",\"error\":\"boom\"},"
	    "{\"type\":\"tool_call\",\"tool_call_id\":\"e\",\"tool_name\":\"n\","
	    "\"state\":\"started\"},"
	    "{\"type\":\"skill\",\"skill_id\":\"k\",\"name\":\"K\","
	    "\"phase\":\"activated\",\"version\":\"1\"},"
	    "{\"type\":\"structured_result\",\"schema_id\":\"x\","
	    "\"schema_version\":2,\"value\":{\"a\":null}},"
	    "{\"type\":\"status\",\"phase\":\"p\",\"status\":\"s\"},"
	    "{\"type\":\"code\"},{\"type\":7},\"junk\","
	    "{\"type\":\"text\",\"text\":\"done\"}]}", 0, NULL);
	msg = api_turn_assistant("r1", "s1", 2, in);
	s = json_dumps(msg, JSON_COMPACT | JSON_SORT_KEYS);
	is_str(s, "{\"id\":\"r1\",\"metadata\":{\"runId\":\"r1\","
	    "\"schemaVersion\":1,\"sequence\":2,\"sessionId\":\"s1\","
	    "\"traceId\":\"t\"},\"parts\":["
	    "{\"input\":{\"q\":1},\"output\":[2],\"providerExecuted\":true,"
	    "\"state\":\"output-available\",\"toolCallId\":\"c\","
	    "\"toolName\":\"n\",\"type\":\"dynamic-tool\"},"
	    "{\"errorText\":\"boom\",\"input\":null,\"providerExecuted\":true,"
	    "\"state\":\"output-error\",\"toolCallId\":\"d\",\"toolName\":\"n\","
	    "\"type\":\"dynamic-tool\"},"
	    "{\"data\":{\"name\":\"K\",\"phase\":\"activated\",\"skillId\":\"k\","
	    "\"version\":\"1\"},\"type\":\"data-skill\"},"
	    "{\"data\":{\"schemaId\":\"x\",\"schemaVersion\":2,"
	    "\"value\":{\"a\":null}},\"type\":\"data-structured-result\"},"
	    "{\"data\":{\"message\":null,\"phase\":\"p\",\"status\":\"s\"},"
	    "\"type\":\"data-status\"},"
	    "{\"state\":\"done\",\"text\":\"done\",\"type\":\"text\"}],"
	    "\"role\":\"assistant\"}",
	    "assistant row: tools, skill, result, status; bad parts skipped");
	free(s);
	json_decref(msg);
	json_decref(in);
}

int
main(void)
{
	test_boundary();
	test_good();
	test_bad();
	test_filename();
	test_helpers();
	test_turn_mapping();
	return (done_testing());
}
