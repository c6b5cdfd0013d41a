#include <sys/types.h>
#include <sys/stat.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/stdlib.h>
#include <bsd/string.h>
#include <ini.h>

#include "config.h"
#include "log.h"
#include "util.h"

#ifndef FLEET_PG_BINDIR
#define FLEET_PG_BINDIR		"/usr/lib/postgresql/15/bin"
#endif

#ifndef FLEET_DATADIR
#define FLEET_DATADIR		"/usr/local/share/fleet"
#endif

#ifndef FLEET_SYSCONFDIR
#define FLEET_SYSCONFDIR	"/usr/local/etc"
#endif

#define ERRORS_MAX	20
#define ENTRIES_MAX	10000

enum key_type {
	K_BACKEND,
	K_BOOL,
	K_MODEL,
	K_INT,
	K_BYTES,
	K_ENV,
	K_NAME,
	K_PATH,
	K_LISTEN,
	K_LOGLEVEL
};

struct keydef {
	const char	*name;
	enum key_type	 type;
	size_t		 off;
	int64_t		 min;
	int64_t		 max;
};

#define O(f)	offsetof(struct fleet_config, f)

static const struct keydef profile_keys[] = {
	{ "listen", K_LISTEN, O(listen_host), 0, 65535 },
	{ "workers", K_INT, O(workers), 1, 64 },
	{ "shutdown_timeout", K_INT, O(shutdown_timeout), 0, 86400 },
	{ "kill_timeout", K_INT, O(kill_timeout), 1, 600 },
	{ "log_level", K_LOGLEVEL, O(log_level), 0, 0 },
	{ "database_url_env", K_ENV, O(database_url_env), 0,
	    CONFIG_ENV_MAX - 1 },
	{ "db_user", K_NAME, O(db_user), 0, CONFIG_USER_MAX - 1 },
	{ "postgres_bindir", K_PATH, O(postgres_bindir), 0,
	    CONFIG_PATH_MAX - 1 },
	{ "heartbeat_seconds", K_INT, O(heartbeat_seconds), 1, 50 },
	{ "stale_after", K_INT, O(stale_after), 2, 86400 },
	{ "max_upload_bytes", K_BYTES, O(max_upload_bytes), 1,
	    1024LL * 1024 * 1024 },
	{ "max_artifact_bytes", K_BYTES, O(max_artifact_bytes), 1,
	    1024LL * 1024 * 1024 },
	{ "sandbox_backend", K_BACKEND, O(sandbox_backend), 0,
	    CONFIG_NAME_MAX },
	{ "sandbox_max", K_INT, O(sandbox_max), 1, 1024 },
	{ "sandbox_warm", K_INT, O(sandbox_warm), 0, 1024 },
	{ "sandbox_queue_max", K_INT, O(sandbox_queue_max), 0, 100000 },
	{ "lease_ttl", K_INT, O(lease_ttl), 5, 86400 },
	{ "sandbox_cpu_seconds", K_INT, O(sandbox_cpu_seconds), 1, 86400 },
	{ "sandbox_memory", K_BYTES, O(sandbox_memory), 64LL * 1024 * 1024,
	    1024LL * 1024 * 1024 * 1024 },
	{ "sandbox_processes", K_INT, O(sandbox_processes), 8, 100000 },
	{ "sandbox_tmp_size", K_BYTES, O(sandbox_tmp_size), 1024 * 1024,
	    1024LL * 1024 * 1024 * 1024 },
	{ "sandbox_file_size", K_BYTES, O(sandbox_file_size), 1024 * 1024,
	    1024LL * 1024 * 1024 * 1024 },
	{ "sandbox_open_files", K_INT, O(sandbox_open_files), 16, 65536 },
	{ "kernel_output_cap", K_BYTES, O(kernel_output_cap), 1024,
	    1024LL * 1024 * 1024 },
	{ "lm_base_url_env", K_ENV, O(lm_base_url_env), 0, CONFIG_ENV_MAX - 1 },
	{ "lm_api_key_env", K_ENV, O(lm_api_key_env), 0, CONFIG_ENV_MAX - 1 },
	{ "root_model", K_MODEL, O(root_model), 0, CONFIG_MODEL_MAX - 1 },
	{ "sub_model", K_MODEL, O(sub_model), 0, CONFIG_MODEL_MAX - 1 },
	{ "root_max_tokens", K_INT, O(root_max_tokens), 16, 1000000 },
	{ "sub_max_tokens", K_INT, O(sub_max_tokens), 16, 1000000 },
	{ "lm_timeout", K_INT, O(lm_timeout), 1, 3600 },
	{ "sub_timeout", K_INT, O(sub_timeout), 1, 3600 },
	{ "lm_max_attempts", K_INT, O(lm_max_attempts), 1, 10 },
	{ "max_iters", K_INT, O(max_iters), 1, 1000 },
	{ "max_llm_calls", K_INT, O(max_llm_calls), 0, 100000 },
	{ "max_output_chars", K_INT, O(max_output_chars), 100, 10000000 },
	{ "max_execution_output_bytes", K_BYTES,
	    O(max_execution_output_bytes), 1024, 1024LL * 1024 * 1024 },
	{ "execution_timeout", K_INT, O(execution_timeout), 1, 86400 },
	{ "turn_timeout", K_INT, O(turn_timeout), 1, 86400 },
	{ "turn_queue_max", K_INT, O(turn_queue_max), 0, 100000 },
	{ "recursion_enabled", K_BOOL, O(recursion_enabled), 0, 1 },
	{ "recursion_max_calls", K_INT, O(recursion_max_calls), 0, 1000 },
	{ "recursion_child_max_iters", K_INT, O(recursion_child_max_iters), 1,
	    1000 },
	{ "recursion_child_max_llm_calls", K_INT,
	    O(recursion_child_max_llm_calls), 0, 100000 },
	{ "recursion_child_max_output_chars", K_INT,
	    O(recursion_child_max_output_chars), 100, 10000000 },
};

struct entry {
	char	*section;
	char	*key;
	char	*value;
	int	 line;
};

struct parse {
	FILE		*fp;
	const char	*path;
	int		 line;
	struct entry	*entries;
	size_t		 nentries;
	char		*errors;
	size_t		 nerrors;
};

static void
perr(struct parse *p, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
perr(struct parse *p, int line, const char *fmt, ...)
{
	va_list	 ap;
	char	*msg, *old = p->errors;

	if (++p->nerrors > ERRORS_MAX)
		return;
	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) == -1)
		fatal("vasprintf");
	va_end(ap);
	if (p->nerrors == ERRORS_MAX)
		xasprintf(&p->errors, "%s%s:%d: %s\n%s: too many errors\n",
		    old ? old : "", p->path, line, msg, p->path);
	else if (line > 0)
		xasprintf(&p->errors, "%s%s:%d: %s\n", old ? old : "",
		    p->path, line, msg);
	else
		xasprintf(&p->errors, "%s%s: %s\n", old ? old : "", p->path,
		    msg);
	free(old);
	free(msg);
}

static void
add_entry(struct parse *p, const char *section, const char *key,
    const char *value)
{
	struct entry	*e;

	p->entries = xreallocarray(p->entries, p->nentries + 1,
	    sizeof(*p->entries));
	e = &p->entries[p->nentries++];
	e->section = xstrdup(section);
	e->key = key ? xstrdup(key) : NULL;
	e->value = value ? xstrdup(value) : NULL;
	e->line = p->line;
}

/*
 * inih calls us only for keys, so a section with none would go unseen:
 * record every section header as an entry without a key.
 */
static void
note_section(struct parse *p, const char *line)
{
	const char	*end;
	char		 name[128];

	while (*line == ' ' || *line == '\t')
		line++;
	if (*line != '[' || (end = strchr(line, ']')) == NULL ||
	    (size_t)(end - line - 1) >= sizeof(name))
		return;
	memcpy(name, line + 1, end - line - 1);
	name[end - line - 1] = '\0';
	if (p->nentries < ENTRIES_MAX)
		add_entry(p, name, NULL, NULL);
}

/*
 * inih reads through us so that we know the line each value came from
 * and can refuse lines longer than its buffer instead of splitting them.
 */
static char *
reader(char *str, int num, void *arg)
{
	struct parse	*p = arg;
	size_t		 len;
	int		 c;

	if (fgets(str, num, p->fp) == NULL)
		return NULL;
	p->line++;
	len = strlen(str);
	if (len > 0 && str[len - 1] != '\n' && !feof(p->fp)) {
		perr(p, p->line, "line longer than %d characters", num - 2);
		while ((c = fgetc(p->fp)) != EOF && c != '\n')
			;
		str[0] = '\0';
	}
	note_section(p, str);
	return str;
}

static int
handler(void *arg, const char *section, const char *key, const char *value)
{
	struct parse	*p = arg;

	if (p->nentries >= ENTRIES_MAX) {
		perr(p, p->line, "too many entries");
		return 0;
	}
	add_entry(p, section, key, value);
	return 1;
}

static void
defaults(struct fleet_config *c)
{
	strlcpy(c->listen_host, "127.0.0.1", sizeof(c->listen_host));
	c->listen_port = 8000;
	c->workers = 2;
	c->shutdown_timeout = 30;
	c->kill_timeout = 5;
	c->log_level = LOG_LEVEL_INFO;
	strlcpy(c->database_url_env, "FLEET_DATABASE_URL",
	    sizeof(c->database_url_env));
	strlcpy(c->db_user, "fleet", sizeof(c->db_user));
	strlcpy(c->postgres_bindir, FLEET_PG_BINDIR, sizeof(c->postgres_bindir));
	c->heartbeat_seconds = 10;
	c->stale_after = 60;
	c->max_upload_bytes = 10 * 1024 * 1024;
	c->max_artifact_bytes = 10 * 1024 * 1024;
	strlcpy(c->sandbox_backend, "local", sizeof(c->sandbox_backend));
	c->sandbox_max = 4;
	c->sandbox_warm = 1;
	c->sandbox_queue_max = 64;
	c->lease_ttl = 120;
	c->sandbox_cpu_seconds = 900;
	c->sandbox_memory = 2LL * 1024 * 1024 * 1024;
	c->sandbox_processes = 64;
	c->sandbox_tmp_size = 256 * 1024 * 1024;
	c->sandbox_file_size = 1024LL * 1024 * 1024;
	c->sandbox_open_files = 256;
	c->kernel_output_cap = 1024 * 1024;
	strlcpy(c->lm_base_url_env, "FLEET_LM_BASE_URL",
	    sizeof(c->lm_base_url_env));
	strlcpy(c->lm_api_key_env, "FLEET_LM_API_KEY",
	    sizeof(c->lm_api_key_env));
	strlcpy(c->root_model, "gpt-4.1-mini", sizeof(c->root_model));
	strlcpy(c->sub_model, "gpt-4.1-mini", sizeof(c->sub_model));
	c->root_max_tokens = 16384;
	c->sub_max_tokens = 16384;
	c->lm_timeout = 300;
	c->sub_timeout = 90;
	c->lm_max_attempts = 3;
	c->max_iters = 12;
	c->max_llm_calls = 32;
	c->max_output_chars = 6000;
	c->max_execution_output_bytes = 2000000;
	c->execution_timeout = 300;
	c->turn_timeout = 1800;
	c->turn_queue_max = 64;
	c->recursion_enabled = 0;
	c->recursion_max_calls = 4;
	c->recursion_child_max_iters = 8;
	c->recursion_child_max_llm_calls = 12;
	c->recursion_child_max_output_chars = 4000;
}

/* "10485760", "512K", "10M", "1G" (powers of 1024). */
static int
parse_bytes(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char		*end;
	long long	 v;
	int64_t		 mul = 1;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || errno != 0 || v < 0)
		return -1;
	if (*end == 'K' || *end == 'k')
		mul = 1024;
	else if (*end == 'M' || *end == 'm')
		mul = 1024 * 1024;
	else if (*end == 'G' || *end == 'g')
		mul = 1024 * 1024 * 1024;
	if (mul != 1)
		end++;
	if (*end != '\0' || v > max / mul || v * mul < min)
		return -1;
	*out = v * mul;
	return 0;
}

static int
valid_env(const char *s)
{
	size_t	 i;

	if (!isupper((unsigned char)s[0]) && s[0] != '_')
		return 0;
	for (i = 0; s[i] != '\0'; i++)
		if (!isupper((unsigned char)s[i]) &&
		    !isdigit((unsigned char)s[i]) && s[i] != '_')
			return 0;
	return 1;
}

static int
valid_name(const char *s)
{
	size_t	 i;

	if (*s == '\0' || strlen(s) > CONFIG_NAME_MAX)
		return 0;
	for (i = 0; s[i] != '\0'; i++)
		if (!isalnum((unsigned char)s[i]) && strchr("._-", s[i]) == NULL)
			return 0;
	return 1;
}

static int
set_key(struct parse *p, struct fleet_config *c, const struct entry *e)
{
	const struct keydef	*k = NULL;
	const char		*errstr;
	char			*base = (char *)c;
	size_t			 i;
	int64_t			 v;

	for (i = 0; i < sizeof(profile_keys) / sizeof(profile_keys[0]); i++)
		if (strcmp(profile_keys[i].name, e->key) == 0)
			k = &profile_keys[i];
	if (k == NULL) {
		perr(p, e->line, "unknown key '%s' in [%s]", e->key,
		    e->section);
		return -1;
	}
	switch (k->type) {
	case K_INT:
		v = strtonum(e->value, k->min, k->max, &errstr);
		if (errstr != NULL) {
			perr(p, e->line, "%s: '%s' is %s (expected an integer "
			    "from %lld to %lld)", e->key, e->value, errstr,
			    (long long)k->min, (long long)k->max);
			return -1;
		}
		*(int *)(base + k->off) = (int)v;
		return 0;
	case K_BOOL:
		if (strcmp(e->value, "true") == 0 || strcmp(e->value, "yes") == 0 ||
		    strcmp(e->value, "1") == 0)
			*(int *)(base + k->off) = 1;
		else if (strcmp(e->value, "false") == 0 ||
		    strcmp(e->value, "no") == 0 || strcmp(e->value, "0") == 0)
			*(int *)(base + k->off) = 0;
		else {
			perr(p, e->line, "%s: '%s' is not true or false",
			    e->key, e->value);
			return -1;
		}
		return 0;
	case K_MODEL:
		if (e->value[0] == '\0' || strlen(e->value) > (size_t)k->max ||
		    strpbrk(e->value, " \t\"\\") != NULL) {
			perr(p, e->line, "%s: '%s' is not a model name", e->key,
			    e->value);
			return -1;
		}
		strlcpy(base + k->off, e->value, k->max + 1);
		return 0;
	case K_BACKEND:
		if (strcmp(e->value, "local") != 0) {
			perr(p, e->line, "%s: '%s' is not a sandbox backend "
			    "(local)", e->key, e->value);
			return -1;
		}
		strlcpy(base + k->off, e->value, k->max + 1);
		return 0;
	case K_BYTES:
		if (parse_bytes(e->value, k->min, k->max,
		    (int64_t *)(base + k->off)) == -1) {
			perr(p, e->line, "%s: '%s' is not a size from %lld to "
			    "%lld bytes (suffixes K, M, G)", e->key, e->value,
			    (long long)k->min, (long long)k->max);
			return -1;
		}
		return 0;
	case K_ENV:
		if (strlen(e->value) > (size_t)k->max || !valid_env(e->value)) {
			perr(p, e->line, "%s: '%s' is not the name of an "
			    "environment variable (A-Z, 0-9, _)", e->key,
			    e->value);
			return -1;
		}
		strlcpy(base + k->off, e->value, k->max + 1);
		return 0;
	case K_NAME:
		if (strlen(e->value) > (size_t)k->max || !valid_name(e->value)) {
			perr(p, e->line, "%s: '%s' is not a valid name", e->key,
			    e->value);
			return -1;
		}
		strlcpy(base + k->off, e->value, k->max + 1);
		return 0;
	case K_PATH:
		if (e->value[0] != '/' || strlen(e->value) > (size_t)k->max) {
			perr(p, e->line, "%s: '%s' is not an absolute path",
			    e->key, e->value);
			return -1;
		}
		strlcpy(base + k->off, e->value, k->max + 1);
		return 0;
	case K_LISTEN:
		if (hostport_parse(e->value, c->listen_host,
		    sizeof(c->listen_host), &c->listen_port) == -1) {
			perr(p, e->line, "%s: '%s' is not HOST:PORT", e->key,
			    e->value);
			return -1;
		}
		return 0;
	case K_LOGLEVEL:
		if (log_parse_level(e->value,
		    (enum log_level *)(base + k->off)) == -1) {
			perr(p, e->line, "%s: '%s' is not one of warn, info, "
			    "debug", e->key, e->value);
			return -1;
		}
		return 0;
	}
	return -1;
}

static int
has_duplicate(struct parse *p, size_t i)
{
	size_t	 j;

	if (p->entries[i].key == NULL)
		return 0;
	for (j = 0; j < i; j++)
		if (p->entries[j].key != NULL &&
		    strcmp(p->entries[j].section, p->entries[i].section) == 0 &&
		    strcmp(p->entries[j].key, p->entries[i].key) == 0) {
			perr(p, p->entries[i].line, "duplicate key '%s' in "
			    "[%s] (first at line %d)", p->entries[i].key,
			    p->entries[i].section, p->entries[j].line);
			return 1;
		}
	return 0;
}

/*
 * Load path and select profile (NULL: the file's default_profile).
 * Returns NULL with *errors set to one FILE:LINE message per line.
 */
struct fleet_config *
config_load(const char *path, const char *profile, char **errors)
{
	struct parse		 p;
	struct fleet_config	*c = NULL, scratch;
	const char		*want = profile, *sect, *name;
	char			 def[CONFIG_NAME_MAX + 1] = "default";
	int			 rc, found = 0, def_line = 0;
	size_t			 i, j;

	memset(&p, 0, sizeof(p));
	p.path = path;
	*errors = NULL;
	if ((p.fp = fopen(path, "r")) == NULL) {
		xasprintf(errors, "%s: %s\n", path, strerror(errno));
		return NULL;
	}
	rc = ini_parse_stream(reader, &p, handler, &p);
	fclose(p.fp);
	if (rc > 0)
		perr(&p, rc, "syntax error (expected [section] or "
		    "key = value)");
	else if (rc < 0)
		perr(&p, 0, "cannot parse");

	for (i = 0; i < p.nentries; i++) {
		if (has_duplicate(&p, i))
			continue;
		sect = p.entries[i].section;
		if (strcmp(sect, "fleet") == 0) {
			if (p.entries[i].key == NULL)
				continue;
			if (strcmp(p.entries[i].key, "default_profile") != 0) {
				perr(&p, p.entries[i].line, "unknown key '%s' "
				    "in [fleet]", p.entries[i].key);
				continue;
			}
			if (!valid_name(p.entries[i].value))
				perr(&p, p.entries[i].line, "default_profile: "
				    "'%s' is not a valid profile name",
				    p.entries[i].value);
			else {
				strlcpy(def, p.entries[i].value, sizeof(def));
				def_line = p.entries[i].line;
			}
		} else if ((strncmp(sect, "profile ", 8) != 0 ||
		    !valid_name(sect + 8)) && p.entries[i].key == NULL)
			perr(&p, p.entries[i].line, "unknown section [%s] "
			    "(expected [fleet] or [profile NAME])", sect);
	}
	if (want == NULL)
		want = def;

	/* Validate every profile; keep the one asked for. */
	for (i = 0; i < p.nentries; i++) {
		sect = p.entries[i].section;
		if (strncmp(sect, "profile ", 8) != 0 || !valid_name(sect + 8))
			continue;
		name = sect + 8;
		for (j = 0; j < i; j++)
			if (strcmp(p.entries[j].section, sect) == 0)
				break;
		if (j < i)
			continue;	/* profile already checked */
		memset(&scratch, 0, sizeof(scratch));
		defaults(&scratch);
		for (j = i; j < p.nentries; j++)
			if (p.entries[j].key != NULL &&
			    strcmp(p.entries[j].section, sect) == 0)
				set_key(&p, &scratch, &p.entries[j]);
		if (scratch.sandbox_warm > scratch.sandbox_max)
			perr(&p, p.entries[i].line, "[%s]: sandbox_warm (%d) "
			    "exceeds sandbox_max (%d)", sect,
			    scratch.sandbox_warm, scratch.sandbox_max);
		if (strcmp(name, want) == 0) {
			found = 1;
			c = xcalloc(1, sizeof(*c));
			*c = scratch;
		}
	}
	if (!found && p.nerrors == 0) {
		if (profile != NULL)
			perr(&p, 0, "no [profile %s] section", want);
		else
			perr(&p, def_line, "default_profile '%s' has no "
			    "[profile %s] section", want, want);
	}

	for (i = 0; i < p.nentries; i++) {
		free(p.entries[i].section);
		free(p.entries[i].key);
		free(p.entries[i].value);
	}
	free(p.entries);
	if (p.nerrors > 0) {
		free(c);
		*errors = p.errors;
		return NULL;
	}
	c->path = xstrdup(path);
	strlcpy(c->profile, want, sizeof(c->profile));
	return c;
}

void
config_free(struct fleet_config *c)
{
	if (c == NULL)
		return;
	free(c->path);
	free(c);
}

/*
 * $FLEET_CONFIG, else etc/fleet.ini beside the directory holding our
 * binary (the source tree, or an install under PREFIX), else the
 * compiled-in system directory.
 */
char *
config_default_path(void)
{
	const char	*env;
	char		 exe[PATH_MAX], *slash, *path;
	ssize_t		 n;

	if ((env = getenv("FLEET_CONFIG")) != NULL && *env != '\0')
		return xstrdup(env);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		if ((slash = strrchr(exe, '/')) != NULL) {
			*slash = '\0';
			xasprintf(&path, "%s/../etc/fleet.ini", exe);
			if (access(path, R_OK) == 0)
				return path;
			free(path);
		}
	}
	return xstrdup(FLEET_SYSCONFDIR "/fleet.ini");
}

/*
 * $FLEET_HOME; else, for root, /var/lib/fleet (a system service, whose
 * embedded database user must be able to reach it); else
 * $XDG_STATE_HOME/fleet, else ~/.local/state/fleet.
 */
char *
state_dir_default(void)
{
	const char	*env;
	char		*path;

	if ((env = getenv("FLEET_HOME")) != NULL && *env != '\0')
		return xstrdup(env);
	if (geteuid() == 0)
		return xstrdup("/var/lib/fleet");
	if ((env = getenv("XDG_STATE_HOME")) != NULL && *env == '/') {
		xasprintf(&path, "%s/fleet", env);
		return path;
	}
	if ((env = getenv("HOME")) != NULL && *env == '/') {
		xasprintf(&path, "%s/.local/state/fleet", env);
		return path;
	}
	return NULL;
}

/*
 * The database to use: the URL in the environment variable the profile
 * names, or, when that is unset or empty, the embedded cluster's socket
 * in the state directory (*embedded is set).
 */
char *
config_db_conninfo(const struct fleet_config *c, const char *statedir,
    int *embedded)
{
	const char	*url;
	char		*conninfo;
	size_t		 i, len;

	url = getenv(c->database_url_env);
	if (url != NULL && *url != '\0') {
		*embedded = 0;
		return xstrdup(url);
	}
	*embedded = 1;
	/* Quoted for libpq: the path may hold spaces or quotes. */
	len = strlen(statedir) * 2 + 64;
	conninfo = xcalloc(1, len);
	strlcpy(conninfo, "host='", len);
	for (i = strlen(conninfo); *statedir != '\0'; statedir++) {
		if (*statedir == '\'' || *statedir == '\\')
			conninfo[i++] = '\\';
		conninfo[i++] = *statedir;
	}
	strlcat(conninfo, "/run/pg' port=5432 dbname=fleet user=fleet", len);
	return conninfo;
}

/*
 * The in-sandbox kernel: kernel/fleet_kernel.py beside the directory
 * holding our binary (source tree), else share/fleet beside it (an
 * install under PREFIX), else the compiled-in data directory.
 */
char *
config_kernel_path(void)
{
	char	 exe[PATH_MAX], *slash, *path;
	ssize_t	 n;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		if ((slash = strrchr(exe, '/')) != NULL) {
			*slash = '\0';
			xasprintf(&path, "%s/../kernel/fleet_kernel.py", exe);
			if (access(path, R_OK) == 0)
				return path;
			free(path);
			xasprintf(&path, "%s/../share/fleet/fleet_kernel.py",
			    exe);
			if (access(path, R_OK) == 0)
				return path;
			free(path);
		}
	}
	return xstrdup(FLEET_DATADIR "/fleet_kernel.py");
}
