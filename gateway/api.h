/*
 * The /api/ routes that answer at once (everything but the Turn stream):
 * Sessions, Turn history, Attachments, Run cancellation.  Shared helpers
 * of api*.c and the multipart/form-data parser.
 */
#ifndef FLEET_API_H
#define FLEET_API_H

#include <stddef.h>

#include <event2/http.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "lib/db.h"

#define API_WORKSPACE_ID	"7793d159-223b-5feb-a99c-f7696debb478"
#define API_UUID_LEN		36
#define API_DB_TIMEOUT_MS	10000
#define API_UPLOAD_TIMEOUT_MS	60000

/* Timestamps as ISO-8601 in UTC with an explicit offset. */
#define API_TS(col)	"to_char(" col " AT TIME ZONE 'UTC', " \
			"'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"

/* api.c */
int	 api_uuid(const char *, size_t, char *);
char	*api_strip(const char *);
json_t	*api_body_json(struct evhttp_request *, int);
int	 api_query(struct evhttp_request *, struct evkeyvalq *);
int	 api_query_int(struct evkeyvalq *, const char *, long, long, long,
	    long *);
void	 api_reply(struct evhttp_request *, int, json_t *);
void	 api_invalid(struct evhttp_request *);
void	 api_db_error(struct evhttp_request *, const struct db_err *,
	    const char *, const char *);
json_t	*api_col_str(PGresult *, int, int);
json_t	*api_col_int(PGresult *, int, int);

/* api_sessions.c; every route handler takes the request and its id */
void	 api_sessions_create(struct evhttp_request *, const char *);
void	 api_sessions_list(struct evhttp_request *, const char *);
void	 api_sessions_get(struct evhttp_request *, const char *);
void	 api_sessions_patch(struct evhttp_request *, const char *);

/* api_turns.c */
void	 api_turns_list(struct evhttp_request *, const char *);
json_t	*api_turn_user(const char *, const char *, long, json_t *);
json_t	*api_turn_assistant(const char *, const char *, long, json_t *);

/* api_attachments.c */
#define API_FILENAME_MAX	255	/* characters */
#define API_FILENAME_BUF	(API_FILENAME_MAX * 4 + 1)
void	 api_attachments_upload(struct evhttp_request *, const char *);
void	 api_attachments_get(struct evhttp_request *, const char *);
int	 api_filename_sanitize(const char *, char *, size_t);

/* api_runs.c */
void	 api_runs_cancel(struct evhttp_request *, const char *);

/* multipart.c: a strict, bounded multipart/form-data parser */
#define MP_BOUNDARY_MAX		70
#define MP_HEADERS_MAX		(8 * 1024)
#define MP_PARTS_MAX		64
#define MP_NAME_MAX		255

struct mp_part {
	char		 name[MP_NAME_MAX + 1];
	char		*filename;	/* NULL: the part has none */
	char		*content_type;	/* NULL: the part has none */
	const char	*data;
	size_t		 len;
};

typedef int	(*mp_cb)(const struct mp_part *, void *);

int	 mp_boundary(const char *, char *, size_t);
int	 mp_parse(const char *, size_t, const char *, mp_cb, void *,
	    const char **);

#endif
