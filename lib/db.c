#include <sys/types.h>
#include <sys/queue.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bsd/string.h>
#include <event2/event.h>
#include <libpq-fe.h>

#include "db.h"
#include "log.h"
#include "util.h"

#define DB_CONNECT_TIMEOUT	"5"
#define DB_RETRY_MIN_MS		100
#define DB_RETRY_MAX_MS		5000
#define DB_QUEUE_MAX		1024
#define DB_PARAMS_MAX		32

struct stmt {
	TAILQ_ENTRY(stmt)	 entry;
	char			*name;
	char			*sql;
};

struct query {
	TAILQ_ENTRY(query)	 entry;
	char			*sql;
	int			 nparams;
	char			*params[DB_PARAMS_MAX];
	int			 isnull[DB_PARAMS_MAX];
	int			 timeout_ms;
	db_cb			 cb;
	void			*arg;
};

enum async_state {
	AS_OFF,
	AS_DOWN,	/* waiting to reconnect */
	AS_CONNECTING,
	AS_IDLE,
	AS_BUSY
};

struct db {
	char			*conninfo;
	char			*appname;
	char			 desc[256];
	PGconn			*conn;
	TAILQ_HEAD(, stmt)	 stmts;

	/* asynchronous mode */
	struct event_base	*base;
	enum async_state	 as;
	struct event		*ev_io;
	struct event		*ev_timer;
	TAILQ_HEAD(, query)	 queue;
	int			 nqueued;
	struct query		*current;
	PGresult		*result;
	int			 retry_ms;
	int			 want_write;
};

static void	async_connect(struct db *);
static void	async_next(struct db *);
static void	async_fail(struct db *, const char *);
static void	async_io(evutil_socket_t, short, void *);
static void	async_timer(evutil_socket_t, short, void *);
static void	query_free(struct query *);

/*
 * A printable form of a connection string or URL without its password:
 * user@host:port/dbname.
 */
void
db_redact(const char *conninfo, char *buf, size_t len)
{
	PQconninfoOption	*opts, *o;
	const char		*user = "", *host = "", *port = "", *dbname = "";
	char			*errmsg = NULL;

	if ((opts = PQconninfoParse(conninfo, &errmsg)) == NULL) {
		PQfreemem(errmsg);
		strlcpy(buf, "(unparsable connection string)", len);
		return;
	}
	for (o = opts; o->keyword != NULL; o++) {
		if (o->val == NULL)
			continue;
		if (strcmp(o->keyword, "user") == 0)
			user = o->val;
		else if (strcmp(o->keyword, "host") == 0)
			host = o->val;
		else if (strcmp(o->keyword, "port") == 0)
			port = o->val;
		else if (strcmp(o->keyword, "dbname") == 0)
			dbname = o->val;
	}
	snprintf(buf, len, "%s%s%s%s%s/%s", user, *user ? "@" : "",
	    *host ? host : "localhost", *port ? ":" : "", port, dbname);
	PQconninfoFree(opts);
}

struct db *
db_new(const char *conninfo, const char *appname)
{
	struct db	*db;

	db = xcalloc(1, sizeof(*db));
	db->conninfo = xstrdup(conninfo);
	db->appname = xstrdup(appname);
	TAILQ_INIT(&db->stmts);
	TAILQ_INIT(&db->queue);
	db_redact(conninfo, db->desc, sizeof(db->desc));
	return db;
}

void
db_free(struct db *db)
{
	struct stmt	*s;

	if (db == NULL)
		return;
	db_async_cancel_all(db);
	if (db->ev_io != NULL)
		event_free(db->ev_io);
	if (db->ev_timer != NULL)
		event_free(db->ev_timer);
	db_disconnect(db);
	while ((s = TAILQ_FIRST(&db->stmts)) != NULL) {
		TAILQ_REMOVE(&db->stmts, s, entry);
		free(s->name);
		free(s->sql);
		free(s);
	}
	free(db->conninfo);
	free(db->appname);
	free(db);
}

const char *
db_describe(struct db *db)
{
	return db->desc;
}

int
db_connected(struct db *db)
{
	return db->conn != NULL && PQstatus(db->conn) == CONNECTION_OK &&
	    (db->base == NULL || db->as == AS_IDLE || db->as == AS_BUSY);
}

void
db_disconnect(struct db *db)
{
	if (db->result != NULL) {
		PQclear(db->result);
		db->result = NULL;
	}
	if (db->conn != NULL)
		PQfinish(db->conn);
	db->conn = NULL;
}

static void
err_set(struct db_err *e, const char *msg, const PGresult *res, int lost)
{
	const char	*state = res ? PQresultErrorField(res,
			    PG_DIAG_SQLSTATE) : NULL;
	size_t		 n;

	if (e == NULL)
		return;
	strlcpy(e->msg, msg, sizeof(e->msg));
	n = strlen(e->msg);
	while (n > 0 && (e->msg[n - 1] == '\n' || e->msg[n - 1] == ' '))
		e->msg[--n] = '\0';
	strlcpy(e->sqlstate, state ? state : "", sizeof(e->sqlstate));
	e->lost = lost;
}

static PGconn *
start_conn(struct db *db, int async)
{
	const char	*keys[] = { "dbname", "application_name",
			    "connect_timeout", NULL };
	const char	*vals[] = { db->conninfo, db->appname,
			    DB_CONNECT_TIMEOUT, NULL };

	/* dbname may be a whole URL or key=value string: expand_dbname. */
	if (async)
		return PQconnectStartParams(keys, vals, 1);
	return PQconnectdbParams(keys, vals, 1);
}

static int
prepare_all(struct db *db, struct db_err *e)
{
	struct stmt	*s;
	PGresult	*res;

	TAILQ_FOREACH(s, &db->stmts, entry) {
		res = PQprepare(db->conn, s->name, s->sql, 0, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			err_set(e, PQerrorMessage(db->conn), res, 0);
			log_warnx("database: prepare %s: %s", s->name,
			    PQerrorMessage(db->conn));
			PQclear(res);
			return -1;
		}
		PQclear(res);
	}
	return 0;
}

/* Connect (blocking) unless connected; prepares registered statements. */
int
db_connect(struct db *db, struct db_err *e)
{
	if (db->conn != NULL && PQstatus(db->conn) == CONNECTION_OK)
		return 0;
	db_disconnect(db);
	db->conn = start_conn(db, 0);
	if (db->conn == NULL || PQstatus(db->conn) != CONNECTION_OK) {
		char msg[512];

		snprintf(msg, sizeof(msg), "cannot connect to %s: %s",
		    db->desc, db->conn ? PQerrorMessage(db->conn) :
		    "out of memory");
		err_set(e, msg, NULL, 1);
		db_disconnect(db);
		return -1;
	}
	if (prepare_all(db, e) == -1) {
		db_disconnect(db);
		return -1;
	}
	return 0;
}

/* Register a statement; it is prepared now if connected, else on connect. */
void
db_prepare(struct db *db, const char *name, const char *sql)
{
	struct stmt	*s;
	PGresult	*res;

	s = xcalloc(1, sizeof(*s));
	s->name = xstrdup(name);
	s->sql = xstrdup(sql);
	TAILQ_INSERT_TAIL(&db->stmts, s, entry);
	if (db->conn != NULL && PQstatus(db->conn) == CONNECTION_OK &&
	    db->base == NULL) {
		res = PQprepare(db->conn, name, sql, 0, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			fatalx("database: prepare %s: %s", name,
			    PQerrorMessage(db->conn));
		PQclear(res);
	}
}

static PGresult *
check_result(struct db *db, PGresult *res, struct db_err *e)
{
	ExecStatusType	 st = PQresultStatus(res);
	int		 lost;

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return res;
	lost = PQstatus(db->conn) != CONNECTION_OK;
	err_set(e, res ? PQresultErrorMessage(res) : PQerrorMessage(db->conn),
	    res, lost);
	if (e != NULL && e->msg[0] == '\0')
		err_set(e, PQerrorMessage(db->conn), res, lost);
	PQclear(res);
	if (lost) {
		log_warnx("database %s: connection lost", db->desc);
		db_disconnect(db);
	}
	return NULL;
}

/* Run prepared statement name with text parameters (NULL means SQL NULL). */
PGresult *
db_exec(struct db *db, const char *name, int n, const char *const *vals,
    struct db_err *e)
{
	if (db_connect(db, e) == -1)
		return NULL;
	return check_result(db, PQexecPrepared(db->conn, name, n, vals, NULL,
	    NULL, 0), e);
}

/* Run sql with text parameters, unprepared. */
PGresult *
db_sql(struct db *db, const char *sql, int n, const char *const *vals,
    struct db_err *e)
{
	if (db_connect(db, e) == -1)
		return NULL;
	return check_result(db, PQexecParams(db->conn, sql, n, NULL, vals,
	    NULL, NULL, 0), e);
}

/* A command without parameters or rows (BEGIN, COMMIT, DDL). */
int
db_cmd(struct db *db, const char *sql, struct db_err *e)
{
	PGresult	*res;

	if (db_connect(db, e) == -1)
		return -1;
	if ((res = check_result(db, PQexec(db->conn, sql), e)) == NULL)
		return -1;
	PQclear(res);
	return 0;
}

/*
 * Asynchronous mode.  Queries queue up and run one at a time; each has a
 * deadline after which the connection is dropped (the only bounded way
 * to abandon a query) and the callback gets an error.  While the server
 * is unreachable, queries fail at once and a reconnect is attempted with
 * a doubling delay.
 */
void
db_async_init(struct db *db, struct event_base *base)
{
	db->base = base;
	db->as = AS_DOWN;
	db->retry_ms = DB_RETRY_MIN_MS;
	if ((db->ev_timer = evtimer_new(base, async_timer, db)) == NULL)
		fatalx("%s: evtimer_new", __func__);
	async_connect(db);
}

static void
query_free(struct query *q)
{
	int	 i;

	for (i = 0; i < q->nparams; i++)
		free(q->params[i]);
	free(q->sql);
	free(q);
}

static void
async_watch(struct db *db, short what)
{
	if (db->ev_io != NULL) {
		event_free(db->ev_io);
		db->ev_io = NULL;
	}
	if (db->conn == NULL || PQsocket(db->conn) < 0)
		return;
	db->ev_io = event_new(db->base, PQsocket(db->conn), what, async_io, db);
	if (db->ev_io == NULL)
		fatalx("%s: event_new", __func__);
	event_add(db->ev_io, NULL);
}

static void
async_down(struct db *db, const char *why)
{
	if (db->as != AS_DOWN)
		log_warnx("database %s: %s", db->desc, why);
	if (db->ev_io != NULL) {
		event_free(db->ev_io);
		db->ev_io = NULL;
	}
	db_disconnect(db);
	db->as = AS_DOWN;
	evtimer_del(db->ev_timer);
	timer_add_ms(db->ev_timer, db->retry_ms);
	db->retry_ms = db->retry_ms * 2 > DB_RETRY_MAX_MS ? DB_RETRY_MAX_MS :
	    db->retry_ms * 2;
}

static void
async_connect(struct db *db)
{
	db_disconnect(db);
	db->conn = start_conn(db, 1);
	if (db->conn == NULL || PQstatus(db->conn) == CONNECTION_BAD) {
		async_down(db, db->conn ? PQerrorMessage(db->conn) :
		    "out of memory");
		return;
	}
	db->as = AS_CONNECTING;
	evtimer_del(db->ev_timer);
	timer_add_ms(db->ev_timer, atoi(DB_CONNECT_TIMEOUT) * 1000);
	async_watch(db, EV_WRITE);
}

/* Fail the query in flight and everything queued: the server is gone. */
static void
async_fail(struct db *db, const char *why)
{
	struct db_err	 e;
	struct query	*q;

	err_set(&e, why, NULL, 1);
	if ((q = db->current) != NULL) {
		db->current = NULL;
		q->cb(NULL, &e, q->arg);
		query_free(q);
	}
	while ((q = TAILQ_FIRST(&db->queue)) != NULL) {
		TAILQ_REMOVE(&db->queue, q, entry);
		db->nqueued--;
		q->cb(NULL, &e, q->arg);
		query_free(q);
	}
}

static void
async_poll_connect(struct db *db)
{
	switch (PQconnectPoll(db->conn)) {
	case PGRES_POLLING_READING:
		async_watch(db, EV_READ);
		return;
	case PGRES_POLLING_WRITING:
		async_watch(db, EV_WRITE);
		return;
	case PGRES_POLLING_OK:
		if (PQsetnonblocking(db->conn, 1) == -1) {
			async_down(db, "cannot set non-blocking mode");
			return;
		}
		log_info("database %s: connected", db->desc);
		db->retry_ms = DB_RETRY_MIN_MS;
		db->as = AS_IDLE;
		evtimer_del(db->ev_timer);
		async_watch(db, EV_READ | EV_PERSIST);
		async_next(db);
		return;
	case PGRES_POLLING_FAILED:
	case PGRES_POLLING_ACTIVE:
		break;
	}
	async_down(db, PQerrorMessage(db->conn));
	async_fail(db, "database unavailable");
}

static void
async_finish_query(struct db *db, PGresult *res)
{
	struct query	*q = db->current;
	struct db_err	 e;
	ExecStatusType	 st = PQresultStatus(res);

	db->current = NULL;
	evtimer_del(db->ev_timer);
	db->as = AS_IDLE;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		q->cb(res, NULL, q->arg);
	else {
		err_set(&e, PQresultErrorMessage(res), res, 0);
		q->cb(NULL, &e, q->arg);
	}
	PQclear(res);
	query_free(q);
}

static void
async_io(evutil_socket_t fd, short what, void *arg)
{
	struct db	*db = arg;
	PGresult	*res;

	(void)fd;
	if (db->as == AS_CONNECTING) {
		async_poll_connect(db);
		return;
	}
	if ((what & EV_WRITE) && db->as == AS_BUSY) {
		if (PQflush(db->conn) == 0)
			async_watch(db, EV_READ | EV_PERSIST);
		else
			async_watch(db, EV_READ | EV_WRITE | EV_PERSIST);
	}
	if (!(what & EV_READ))
		return;
	if (PQconsumeInput(db->conn) == 0) {
		async_down(db, PQerrorMessage(db->conn));
		async_fail(db, "database connection lost");
		return;
	}
	if (db->as != AS_BUSY) {
		/* Nothing asked: a notice, or the server going away. */
		if (PQstatus(db->conn) != CONNECTION_OK) {
			async_down(db, "connection closed by the server");
			async_fail(db, "database connection lost");
		}
		return;
	}
	while (!PQisBusy(db->conn)) {
		if ((res = PQgetResult(db->conn)) == NULL) {
			/* All results read: hand over the last one. */
			res = db->result;
			db->result = NULL;
			if (res == NULL) {
				async_down(db, "query produced no result");
				async_fail(db, "database connection lost");
				return;
			}
			async_finish_query(db, res);
			async_next(db);
			return;
		}
		if (db->result != NULL)
			PQclear(db->result);
		db->result = res;
	}
}

static void
async_timer(evutil_socket_t fd, short what, void *arg)
{
	struct db	*db = arg;

	(void)fd;
	(void)what;
	switch (db->as) {
	case AS_DOWN:
		async_connect(db);
		break;
	case AS_CONNECTING:
		async_down(db, "connection timed out");
		async_fail(db, "database unavailable");
		break;
	case AS_BUSY:
		async_down(db, "query timed out; reconnecting");
		async_fail(db, "database query timed out");
		break;
	case AS_IDLE:
	case AS_OFF:
		break;
	}
}

static void
async_next(struct db *db)
{
	struct query	*q;
	int		 rc;

	if (db->as != AS_IDLE || (q = TAILQ_FIRST(&db->queue)) == NULL)
		return;
	TAILQ_REMOVE(&db->queue, q, entry);
	db->nqueued--;
	rc = PQsendQueryParams(db->conn, q->sql, q->nparams, NULL,
	    (const char *const *)q->params, NULL, NULL, 0);
	db->current = q;
	if (rc == 0) {
		async_down(db, PQerrorMessage(db->conn));
		async_fail(db, "database connection lost");
		return;
	}
	db->as = AS_BUSY;
	timer_add_ms(db->ev_timer, q->timeout_ms);
	rc = PQflush(db->conn);
	if (rc == 1)
		async_watch(db, EV_READ | EV_WRITE | EV_PERSIST);
	else if (rc == -1) {
		async_down(db, PQerrorMessage(db->conn));
		async_fail(db, "database connection lost");
	}
}

/*
 * Queue sql with text parameters (NULL for SQL NULL).  cb runs exactly
 * once, from the event loop or (when the database is down or the queue
 * is full) right away, with a result it must not free, or an error.
 */
void
db_async_sql(struct db *db, const char *sql, int n, const char *const *vals,
    int timeout_ms, db_cb cb, void *arg)
{
	struct query	*q;
	struct db_err	 e;
	int		 i;

	if (db->as == AS_DOWN || db->as == AS_OFF ||
	    db->nqueued >= DB_QUEUE_MAX || n > DB_PARAMS_MAX) {
		err_set(&e, db->as == AS_DOWN || db->as == AS_OFF ?
		    "database unavailable" : "database queue full", NULL,
		    db->as == AS_DOWN);
		cb(NULL, &e, arg);
		return;
	}
	q = xcalloc(1, sizeof(*q));
	q->sql = xstrdup(sql);
	q->nparams = n;
	for (i = 0; i < n; i++)
		q->params[i] = vals[i] ? xstrdup(vals[i]) : NULL;
	q->timeout_ms = timeout_ms;
	q->cb = cb;
	q->arg = arg;
	TAILQ_INSERT_TAIL(&db->queue, q, entry);
	db->nqueued++;
	async_next(db);
}

/* Drop every pending callback without calling it (the owner is going). */
void
db_async_cancel_all(struct db *db)
{
	struct query	*q;

	if (db->current != NULL) {
		query_free(db->current);
		db->current = NULL;
		/* The connection has a query in flight nobody will read. */
		db_disconnect(db);
		if (db->as == AS_BUSY)
			db->as = AS_DOWN;
	}
	while ((q = TAILQ_FIRST(&db->queue)) != NULL) {
		TAILQ_REMOVE(&db->queue, q, entry);
		db->nqueued--;
		query_free(q);
	}
}
