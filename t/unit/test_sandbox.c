/*
 * The local sandbox backend against real kernels: what a cell cannot do
 * inside (each with a control that can), the limits, and that destroy
 * leaves no process behind.  Needs root, bwrap and user namespaces; uses
 * slots far above any daemon's, chosen by pid so that runs can overlap.
 */
#include <sys/types.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <seccomp.h>

#include "leasemgr/sandbox.h"
#include "lib/util.h"
#include "tap.h"

#define SLOT		slot_base	/* .. + 7 */
#define UID(slot)	((uid_t)(SANDBOX_UID_BASE + (slot)))
#define READY_MS	10000
#define CELL_MS		20000
#define RUNS		10
#define BUFSZ		(1 << 16)

struct kern {
	struct sandbox	 sb;
	char		 buf[BUFSZ];
	size_t		 len;
	int		 direct;	/* no bwrap: a plain child of ours */
};

struct cell {
	char	 out[8192];	/* stdout and result text */
	char	 err[4096];	/* stderr text */
	char	 ename[128];
	char	 evalue[512];
	char	 status[32];	/* of done; empty if none came */
};

static int	 slot_base;	/* apart from a concurrent run's */
static char	 kernel[PATH_MAX];
static char	 base[64];
static char	 errbuf[512];

static int64_t
mono_us(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t	 x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static double
median_ms(int64_t *us, size_t n)
{
	qsort(us, n, sizeof(*us), cmp_i64);
	return (n % 2 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2) / 1000.0;
}

static void
limits_default(struct sandbox_spec *spec, int slot, const char *volume)
{
	memset(spec, 0, sizeof(*spec));
	spec->kernel = kernel;
	spec->python = "/usr/bin/python3";
	spec->volume = volume;
	spec->slot = slot;
	spec->limits.cpu_seconds = 60;
	spec->limits.address_space = (int64_t)1 << 30;
	spec->limits.open_files = 256;
	spec->limits.file_size = (int64_t)32 << 20;
	spec->limits.processes = 64;
	spec->limits.tmp_size = (int64_t)8 << 20;
}

/* s as the body of a JSON string, cut to fit out. */
static void
json_escape(const char *s, char *out, size_t sz)
{
	size_t	 n = 0;

	for (; *s != '\0' && n + 7 < sz; s++) {
		switch (*s) {
		case '"':
		case '\\':
			out[n++] = '\\';
			out[n++] = *s;
			break;
		case '\n':
			out[n++] = '\\';
			out[n++] = 'n';
			break;
		default:
			if ((unsigned char)*s < 0x20)
				n += snprintf(out + n, sz - n, "\\u%04x", *s);
			else
				out[n++] = *s;
		}
	}
	out[n] = '\0';
}

/*
 * The string value of "key" in a one-line JSON object, unescaped into
 * out; non-ASCII escapes become '?'.  0 if found.
 */
static int
json_str(const char *line, const char *key, char *out, size_t sz)
{
	char		 pat[64];
	const char	*p;
	size_t		 n = 0;
	unsigned int	 u;
	char		 c;

	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	if ((p = strstr(line, pat)) == NULL) {
		out[0] = '\0';
		return -1;
	}
	for (p += strlen(pat); *p != '\0' && *p != '"'; p++) {
		c = *p;
		if (c == '\\' && p[1] != '\0') {
			switch (*++p) {
			case 'n':
				c = '\n';
				break;
			case 't':
				c = '\t';
				break;
			case 'r':
				c = '\r';
				break;
			case 'u':
				c = sscanf(p + 1, "%4x", &u) == 1 && u < 0x80 ?
				    (char)u : '?';
				p += strspn(p + 1, "0123456789abcdefABCDEF");
				break;
			default:
				c = *p;
			}
		}
		if (n + 1 < sz)
			out[n++] = c;
	}
	out[n] = '\0';
	return 0;
}

static void
append(char *dst, size_t sz, const char *s)
{
	size_t	 n = strlen(dst);

	snprintf(dst + n, sz - n, "%s", s);
}

/* One line from the kernel: 1, or 0 at EOF, or -1 on timeout. */
static int
kern_line(struct kern *k, char *line, size_t sz, int ms)
{
	struct pollfd	 pfd;
	int64_t		 deadline = mono_us() + (int64_t)ms * 1000;
	char		*nl;
	size_t		 n;
	ssize_t		 r;
	int		 rc;

	for (;;) {
		if ((nl = memchr(k->buf, '\n', k->len)) != NULL ||
		    k->len == sizeof(k->buf)) {
			n = nl != NULL ? (size_t)(nl - k->buf) : k->len;
			snprintf(line, sz, "%.*s", (int)n, k->buf);
			n = nl != NULL ? n + 1 : n;
			memmove(k->buf, k->buf + n, k->len - n);
			k->len -= n;
			return 1;
		}
		pfd.fd = k->sb.out;
		pfd.events = POLLIN;
		rc = poll(&pfd, 1, (int)((deadline - mono_us()) / 1000));
		if (rc == -1 && errno == EINTR)
			continue;
		if (rc <= 0)
			return -1;
		r = read(k->sb.out, k->buf + k->len, sizeof(k->buf) - k->len);
		if (r == -1 && errno == EINTR)
			continue;
		if (r <= 0)
			return 0;
		k->len += r;
	}
}

static int
kern_send(struct kern *k, const char *s)
{
	size_t	 len = strlen(s);
	ssize_t	 n;

	while (len > 0) {
		if ((n = write(k->sb.in, s, len)) == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		s += n;
		len -= n;
	}
	return 0;
}

static void	kern_stop(struct kern *);

/* Show what bwrap said on stderr, if anything. */
static void
kern_diag(struct kern *k)
{
	char	 buf[1024];
	ssize_t	 n;

	if (k->sb.err == -1 || fd_nonblock(k->sb.err) == -1)
		return;
	if ((n = read(k->sb.err, buf, sizeof(buf) - 1)) > 0) {
		buf[n] = '\0';
		printf("# stderr: %s\n", buf);
	}
}

/*
 * Spawn (sandboxed, or directly when k->direct) and read ready; spawn_us
 * and ready_us, if not NULL, get how long each took.
 */
static int
kern_start(struct kern *k, const struct sandbox_spec *spec,
    int64_t *spawn_us, int64_t *ready_us)
{
	char	 line[1024];
	int64_t	 t0 = mono_us();
	int	 in[2], out[2];

	k->len = 0;
	if (!k->direct) {
		if (sandbox_local_spawn(spec, &k->sb, errbuf,
		    sizeof(errbuf)) == -1) {
			printf("# spawn: %s\n", errbuf);
			return -1;
		}
	} else {
		if (pipe2(in, O_CLOEXEC) == -1)
			return -1;
		if (pipe2(out, O_CLOEXEC) == -1) {
			close(in[0]);
			close(in[1]);
			return -1;
		}
		if ((k->sb.pid = fork()) == 0) {
			if (dup2(in[0], 0) == -1 || dup2(out[1], 1) == -1)
				_exit(127);
			execl("/usr/bin/python3", "python3", "-I", "-S", kernel,
			    (char *)NULL);
			_exit(127);
		}
		close(in[0]);
		close(out[1]);
		k->sb.in = in[1];
		k->sb.out = out[0];
		k->sb.err = -1;
		if (k->sb.pid == -1) {
			kern_stop(k);
			return -1;
		}
	}
	if (spawn_us != NULL)
		*spawn_us = mono_us() - t0;
	line[0] = '\0';
	if (kern_line(k, line, sizeof(line), READY_MS) != 1 ||
	    strstr(line, "\"event\":\"ready\"") == NULL) {
		printf("# no ready line: '%s'\n", line);
		kern_diag(k);
		kern_stop(k);
		return -1;
	}
	if (ready_us != NULL)
		*ready_us = mono_us() - t0;
	return 0;
}

static void
kern_stop(struct kern *k)
{
	int	 st;

	if (!k->direct) {
		sandbox_local_destroy(&k->sb);
		return;
	}
	if (k->sb.pid > 0) {
		kill(k->sb.pid, SIGKILL);
		waitpid(k->sb.pid, &st, 0);
	}
	close(k->sb.in);
	close(k->sb.out);
	k->sb.pid = k->sb.in = k->sb.out = -1;
}

/* Run code as one cell: 0 once its done came, -1 on EOF or timeout. */
static int
cell(struct kern *k, const char *code, struct cell *c, int ms)
{
	static int	 seq;
	static char	 req[BUFSZ], esc[BUFSZ - 128];
	char		 line[BUFSZ], id[32], ev[32], text[BUFSZ];
	int		 rc;

	memset(c, 0, sizeof(*c));
	snprintf(id, sizeof(id), "c%d", ++seq);
	json_escape(code, esc, sizeof(esc));
	snprintf(req, sizeof(req),
	    "{\"type\":\"execute\",\"id\":\"%s\",\"code\":\"%s\"}\n", id, esc);
	if (kern_send(k, req) == -1)
		return -1;
	while ((rc = kern_line(k, line, sizeof(line), ms)) == 1) {
		json_str(line, "event", ev, sizeof(ev));
		json_str(line, "text", text, sizeof(text));
		if (strcmp(ev, "stdout") == 0 || strcmp(ev, "result") == 0)
			append(c->out, sizeof(c->out), text);
		else if (strcmp(ev, "stderr") == 0)
			append(c->err, sizeof(c->err), text);
		else if (strcmp(ev, "error") == 0) {
			json_str(line, "ename", c->ename, sizeof(c->ename));
			json_str(line, "evalue", c->evalue, sizeof(c->evalue));
		} else if (strcmp(ev, "done") == 0) {
			json_str(line, "status", c->status, sizeof(c->status));
			return 0;
		}
	}
	return -1;
}

/* Processes whose real uid is uid, or whose command line holds marker. */
static int
count_procs(uid_t uid, const char *marker)
{
	struct dirent	*de;
	DIR		*d;
	char		 path[300], buf[4096], *p;
	ssize_t		 n, i;
	int		 fd, count = 0;

	if ((d = opendir("/proc")) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/%s", de->d_name,
		    marker != NULL ? "cmdline" : "status");
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		for (i = 0; i < n; i++)
			if (buf[i] == '\0')
				buf[i] = ' ';
		buf[n] = '\0';
		if (marker != NULL)
			count += strstr(buf, marker) != NULL;
		else if ((p = strstr(buf, "\nUid:\t")) != NULL)
			count += strtol(p + 6, NULL, 10) == (long)uid;
	}
	closedir(d);
	return count;
}

static int
count_fds(void)
{
	struct dirent	*de;
	DIR		*d;
	int		 n = 0;

	if ((d = opendir("/proc/self/fd")) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;	/* the one readdir holds */
}

static int
rm_entry(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)st;
	(void)f;
	return type == FTW_DP ? rmdir(path) : unlink(path);
}

static void
rm_base(void)
{
	nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void
test_probe(void)
{
	int	 rc;

	rc = sandbox_local_probe(errbuf, sizeof(errbuf));
	ok(rc == 0, "probe: bwrap and user namespaces work here");
	if (rc != 0) {
		printf("# %s\n", errbuf);
		printf("Bail out! cannot sandbox here\n");
		exit(1);
	}
}

/*
 * Docker's default seccomp profile refuses namespaces with EPERM; under
 * the same refusal the probe must fail and say why.
 */
static void
test_probe_refuses(void)
{
	scmp_filter_ctx	 ctx;
	char		 msg[512];
	ssize_t		 n;
	size_t		 len = 0;
	pid_t		 pid;
	int		 p[2], st, rc;

	if (pipe(p) == -1)
		return;
	if ((pid = fork()) == 0) {
		close(p[0]);
		if ((ctx = seccomp_init(SCMP_ACT_ALLOW)) == NULL ||
		    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
		    SCMP_SYS(unshare), 0) != 0 ||
		    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
		    SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ,
		    CLONE_NEWUSER, CLONE_NEWUSER)) != 0 ||
		    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS),
		    SCMP_SYS(clone3), 0) != 0 || seccomp_load(ctx) != 0)
			_exit(2);
		rc = sandbox_local_probe(msg, sizeof(msg));
		n = snprintf(msg + strlen(msg), 8, "|%d", rc);
		if (write(p[1], msg, strlen(msg)) == -1)
			_exit(3);
		_exit(0);
	}
	close(p[1]);
	while (len < sizeof(msg) - 1 &&
	    (n = read(p[0], msg + len, sizeof(msg) - 1 - len)) > 0)
		len += n;
	msg[len] = '\0';
	close(p[0]);
	waitpid(pid, &st, 0);
	like(msg, "|-1", "probe fails when user namespaces are refused");
	like(msg, "no code can run", "and says that no code will run");
	like(msg, "user namespaces", "and why: %s", msg);
}

static void
test_spec_errors(void)
{
	static const char *const	 badenv[] = { "9X=1", NULL };
	struct sandbox_spec		 spec;
	struct sandbox			 sb;
	char				 dir[128], vol[128];

	limits_default(&spec, -1, NULL);
	is_int(sandbox_local_spawn(&spec, &sb, errbuf, sizeof(errbuf)), -1,
	    "spawn refuses a negative slot");
	like(errbuf, "slot", "with a message (%s)", errbuf);
	ok(sb.pid == -1 && sb.in == -1 && sb.out == -1 && sb.err == -1,
	    "and leaves the sandbox empty");
	sandbox_local_destroy(&sb);

	limits_default(&spec, SLOT, NULL);
	spec.env = badenv;
	is_int(sandbox_local_spawn(&spec, &sb, errbuf, sizeof(errbuf)), -1,
	    "spawn refuses a bad environment name");
	limits_default(&spec, SLOT, NULL);
	spec.kernel = "/nonexistent/fleet_kernel.py";
	is_int(sandbox_local_spawn(&spec, &sb, errbuf, sizeof(errbuf)), -1,
	    "spawn refuses a missing kernel");
	like(errbuf, "No such file", "with the reason (%s)", errbuf);
	limits_default(&spec, SLOT, "/nonexistent/volume");
	is_int(sandbox_local_spawn(&spec, &sb, errbuf, sizeof(errbuf)), -1,
	    "spawn refuses a missing volume");
	limits_default(&spec, SLOT, NULL);
	spec.limits.processes = SANDBOX_KERNEL_TASKS - 1;
	is_int(sandbox_local_spawn(&spec, &sb, errbuf, sizeof(errbuf)), -1,
	    "spawn refuses fewer processes than the kernel's threads");

	/* A volume under a directory the slot's uid cannot search. */
	snprintf(dir, sizeof(dir), "%s/private", base);
	snprintf(vol, sizeof(vol), "%s/private/v", base);
	if (mkdir(dir, 0700) == -1 || mkdir(vol, 0700) == -1)
		return;
	limits_default(&spec, SLOT, vol);
	is_int(sandbox_local_spawn(&spec, &sb, errbuf, sizeof(errbuf)), -1,
	    "spawn refuses a volume the slot's uid cannot reach");
	like(errbuf, "Permission denied", "and says so (%s)", errbuf);
	ok(sb.pid == -1 && sb.in == -1, "leaving nothing behind");
	sandbox_local_destroy(&sb);
}

static void
test_network(struct kern *k)
{
	struct sockaddr_in	 sin;
	socklen_t		 slen = sizeof(sin);
	struct cell		 c;
	char			 code[256];
	int			 lfd, cfd;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd == -1 || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) ||
	    listen(lfd, 4) || getsockname(lfd, (struct sockaddr *)&sin,
	    &slen)) {
		ok(0, "listen on 127.0.0.1: %s", strerror(errno));
		return;
	}
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ok(cfd != -1 && connect(cfd, (struct sockaddr *)&sin,
	    sizeof(sin)) == 0, "control: the host connects to 127.0.0.1:%d",
	    ntohs(sin.sin_port));
	if (cfd != -1)
		close(cfd);

	snprintf(code, sizeof(code), "import socket\n"
	    "socket.create_connection(('127.0.0.1', %d), timeout=5)",
	    ntohs(sin.sin_port));
	cell(k, code, &c, CELL_MS);
	is_str(c.ename, "ConnectionRefusedError",
	    "the sandbox cannot reach the host's 127.0.0.1:%d",
	    ntohs(sin.sin_port));
	cell(k, "import socket\n"
	    "print([n for i, n in socket.if_nameindex()])", &c, CELL_MS);
	is_str(c.out, "['lo']\n", "its only interface is lo");
	cell(k, "import socket\n"
	    "socket.create_connection(('1.1.1.1', 53), timeout=5)", &c,
	    CELL_MS);
	like(c.evalue, "Network is unreachable", "and nothing is routed");
	close(lfd);
}

static void
test_filesystem(struct kern *k, const char *vol, uid_t uid)
{
	struct cell	 c;
	struct stat	 st;
	char		 path[PATH_MAX + 32], code[PATH_MAX + 64], buf[64];
	FILE		*f;

	snprintf(path, sizeof(path), "%s/host-secret.txt", base);
	if ((f = fopen(path, "w")) == NULL)
		return;
	fputs("host secret\n", f);
	fclose(f);
	ok((f = fopen(path, "r")) != NULL && fgets(buf, sizeof(buf), f) &&
	    strcmp(buf, "host secret\n") == 0,
	    "control: the host reads %s", path);
	if (f != NULL)
		fclose(f);
	snprintf(code, sizeof(code), "open('%s').read()", path);
	cell(k, code, &c, CELL_MS);
	is_str(c.ename, "FileNotFoundError",
	    "the sandbox cannot see the host's /tmp");
	cell(k, "import os\n"
	    "print(sorted(set(os.listdir('/')) - {'bin', 'sbin', 'lib', "
	    "'lib32', 'lib64', 'libx32'}), sorted(os.listdir('/etc')))\n"
	    "print([p for p in ('/root', '/home', '/var', '/run', '/sys', "
	    "'/boot', '/etc/passwd', '/etc/shadow') if os.path.lexists(p)])",
	    &c, CELL_MS);
	is_str(c.out, "['dev', 'etc', 'opt', 'proc', 'tmp', 'usr', "
	    "'workspace'] ['alternatives', "
	    "'ld.so.cache']\n[]\n",
	    "only system dirs, no host /etc, /root, /home, /var");

	cell(k, "open('/usr/fleet-probe', 'w')", &c, CELL_MS);
	is_str(c.ename, "OSError", "writing /usr fails");
	like(c.evalue, "Read-only file system", "read-only (%s)", c.evalue);
	cell(k, "for p in ('/x', '/opt/x', '/opt/fleet/fleet_kernel.py', "
	    "'/etc/x', '/dev/x', '/bin/x'):\n"
	    "    try:\n"
	    "        open(p, 'a')\n"
	    "    except OSError as e:\n"
	    "        print(p, e.errno)\n", &c, CELL_MS);
	is_str(c.out, "/x 30\n/opt/x 30\n/opt/fleet/fleet_kernel.py 30\n"
	    "/etc/x 30\n/dev/x 30\n/bin/x 30\n",
	    "so are /, /opt, the kernel, /etc, /dev and /bin (EROFS)");

	cell(k, "import os\n"
	    "open('/workspace/hello.txt', 'w').write('from the sandbox')\n"
	    "open('/tmp/t', 'wb').write(b'x' * (1 << 20))\n"
	    "print(os.getcwd(), os.path.getsize('/tmp/t'))", &c, CELL_MS);
	is_str(c.out, "/workspace 1048576\n", "/workspace and /tmp are "
	    "writable, and the kernel starts in /workspace");
	snprintf(path, sizeof(path), "%s/hello.txt", vol);
	buf[0] = '\0';
	if ((f = fopen(path, "r")) != NULL) {
		if (fgets(buf, sizeof(buf), f) == NULL)
			buf[0] = '\0';
		fclose(f);
	}
	is_str(buf, "from the sandbox", "the file is in the volume on the "
	    "host");
	ok(stat(path, &st) == 0 && st.st_uid == uid &&
	    st.st_gid == SANDBOX_UID_BASE && (st.st_mode & 0777) == 0660,
	    "owned by the slot's uid %ld, group-writable by the sandboxes' "
	    "group", (long)uid);
	ok(stat(vol, &st) == 0 && st.st_uid == 0 &&
	    st.st_gid == SANDBOX_UID_BASE && (st.st_mode & 07777) == 02770,
	    "the volume is root's and the sandboxes' group's, mode 2770");
	cell(k, "open('/tmp/big', 'wb').write(b'x' * (16 << 20))", &c,
	    CELL_MS);
	like(c.evalue, "No space left on device",
	    "/tmp is bounded by tmp_size (%s: %s)", c.ename, c.evalue);
	cell(k, "open('/dev/shm/big', 'wb').write(b'x' * (16 << 20))", &c,
	    CELL_MS);
	like(c.evalue, "No space left on device", "so is /dev/shm");
	cell(k, "import os\n"
	    "try:\n"
	    "    open('/workspace/big', 'wb').write(b'x' * (40 << 20))\n"
	    "finally:\n"
	    "    os.unlink('/workspace/big')", &c, CELL_MS);
	like(c.evalue, "File too large", "RLIMIT_FSIZE holds (%s: %s)",
	    c.ename, c.evalue);
}

static void
test_seccomp(struct kern *k, struct kern *direct)
{
	static const char	*code = "import ctypes\n"
	    "libc = ctypes.CDLL(None, use_errno=True)\n"
	    "def e(f, *a):\n"
	    "    ctypes.set_errno(0)\n"
	    "    return f(*a), ctypes.get_errno()\n"
	    "print('traceme', e(libc.ptrace, 0, 0, None, None))\n"
	    "print('peekuser', e(libc.ptrace, 3, 1, None, None))\n";
	struct cell		 c;

	cell(direct, code, &c, CELL_MS);
	like(c.out, "peekuser (-1, 3)", "control: unfiltered, ptrace of a "
	    "process we do not trace fails with ESRCH");
	cell(k, code, &c, CELL_MS);
	is_str(c.out, "traceme (-1, 1)\npeekuser (-1, 1)\n",
	    "in the sandbox seccomp denies ptrace with EPERM");
	cell(k, "import ctypes\n"
	    "libc = ctypes.CDLL(None, use_errno=True)\n"
	    "def e(f, *a):\n"
	    "    ctypes.set_errno(0)\n"
	    "    return f(*a), ctypes.get_errno()\n"
	    "print('unshare', e(libc.unshare, 0x10000000))\n"
	    "print('setns', e(libc.setns, 0, 0))\n"
	    "print('mount', e(libc.mount, b'none', b'/tmp', b'tmpfs', 0, "
	    "None))\n"
	    "print('keyctl', e(libc.syscall, 250, 0, 0, 0, 0, 0))\n"
	    "print('bpf', e(libc.syscall, 321, 0, 0, 0))\n"
	    "print('personality', e(libc.personality, 0x0040000))\n"
	    "print('query', libc.personality(ctypes.c_ulong(0xffffffff)) >= 0,"
	    " libc.personality(-1) >= 0)\n"
	    "print('tiocsti', e(libc.ioctl, 0, 0x5412, b'x'))\n",
	    &c, CELL_MS);
	is_str(c.out, "unshare (-1, 1)\nsetns (-1, 1)\nmount (-1, 1)\n"
	    "keyctl (-1, 1)\nbpf (-1, 1)\npersonality (-1, 1)\n"
	    "query True True\ntiocsti (-1, 1)\n",
	    "unshare, setns, mount, keyctl, bpf, personality changes and "
	    "TIOCSTI fail with EPERM; reading the persona works");
	cell(k, "for l in open('/proc/self/status'):\n"
	    "    if l.split(':')[0] in ('NoNewPrivs', 'Seccomp', 'CapEff', "
	    "'CapBnd'):\n"
	    "        print(l.strip().replace('\\t', ' '))\n", &c, CELL_MS);
	is_str(c.out, "CapEff: 0000000000000000\nCapBnd: 0000000000000000\n"
	    "NoNewPrivs: 1\nSeccomp: 2\n",
	    "no capabilities, no_new_privs, a seccomp filter");
	cell(k, "import os\n"
	    "print(sorted(os.readlink('/proc/self/fd/' + f) for f in "
	    "os.listdir('/proc/self/fd') if not os.readlink('/proc/self/fd/' "
	    "+ f).startswith('pipe:')))", &c, CELL_MS);
	ok(strstr(c.out, "workspace") == NULL &&
	    strstr(c.out, "fleet_kernel") == NULL,
	    "no descriptor of a host path leaks in (%s)", c.out);
}

static void
test_other_volume(const char *vol_a, const char *vol_b)
{
	struct sandbox_spec	 spec;
	struct kern		*k;
	struct cell		 c;
	char			 code[PATH_MAX + 64];

	k = calloc(1, sizeof(*k));
	limits_default(&spec, SLOT + 1, vol_b);
	if (k == NULL || kern_start(k, &spec, NULL, NULL) == -1) {
		ok(0, "second sandbox starts");
		free(k);
		return;
	}
	cell(k, "import os\nprint(os.listdir('/workspace'))", &c, CELL_MS);
	is_str(c.out, "[]\n", "a second sandbox sees only its own volume");
	snprintf(code, sizeof(code), "open('%s/hello.txt').read()", vol_a);
	cell(k, code, &c, CELL_MS);
	is_str(c.ename, "FileNotFoundError",
	    "and not the first one's, by its host path");
	cell(k, "import os\n"
	    "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))",
	    &c, CELL_MS);
	is_str(c.out, "[1, 2]\n", "nor any process but its own");
	cell(k, "import os\nprint(os.getuid(), os.getgid())", &c, CELL_MS);
	snprintf(code, sizeof(code), "%ld %ld\n", (long)UID(SLOT + 1),
	    (long)SANDBOX_UID_BASE);
	is_str(c.out, code, "it runs as its slot's uid, in the sandboxes' "
	    "group");
	kern_stop(k);
	free(k);
}

static void
test_env(struct kern *k)
{
	struct cell	 c;

	cell(k, "import os\nprint(' '.join(sorted(os.environ)))\n"
	    "print(os.environ['HOME'], os.environ['PATH'], "
	    "os.environ['FLEET_LEASE'])", &c, CELL_MS);
	is_str(c.out, "FLEET_LEASE HOME LANG PATH PWD\n"
	    "/workspace /usr/bin:/bin lease-1\n",
	    "the environment is the minimal one plus spec->env");
	ok(strstr(c.out, "FLEET_TEST_HOST_SECRET") == NULL,
	    "no host variable leaks in");
}

static void
test_memory(struct kern *k)
{
	struct cell	 c;

	cell(k, "b = bytearray(64 << 20)\nprint(len(b))\ndel b", &c,
	    CELL_MS);
	is_str(c.out, "67108864\n", "control: 64 MiB can be allocated");
	cell(k, "b = bytearray(4 << 30)", &c, CELL_MS);
	is_str(c.ename, "MemoryError", "4 GiB cannot (RLIMIT_AS)");
	cell(k, "print('still here')", &c, CELL_MS);
	is_str(c.out, "still here\n", "and the kernel lives on");
}

/* A session leader and a double-forked daemon, both outliving a lease. */
static void
test_outlive(struct kern *k, uid_t uid)
{
	struct cell	 c;
	char		 code[1024], m1[32], m2[32];
	int64_t		 t0;

	/* Sleep lengths unique to this run mark the two processes. */
	snprintf(m1, sizeof(m1), "sleep %d", 1000000 + slot_base);
	snprintf(m2, sizeof(m2), "sleep %d", 1000001 + slot_base);
	snprintf(code, sizeof(code), "import os, subprocess\n"
	    "subprocess.Popen('%s'.split(), start_new_session=True, "
	    "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
	    "stderr=subprocess.DEVNULL)\n"
	    "r, w = os.pipe()\n"
	    "pid = os.fork()\n"
	    "if pid == 0:\n"
	    "    os.setsid()\n"
	    "    if os.fork() == 0:\n"
	    "        fd = os.open('/dev/null', os.O_RDWR)\n"
	    "        for i in (0, 1, 2):\n"
	    "            os.dup2(fd, i)\n"
	    "        os.execv('/usr/bin/sleep', '%s'.split())\n"
	    "    os._exit(0)\n"
	    "os.close(w)\n"
	    "os.read(r, 1)\n"		/* EOF: the daemon has exec'd */
	    "os.waitpid(pid, 0)\n"
	    "print('started')", m1, m2);
	cell(k, code, &c, CELL_MS);
	is_str(c.out, "started\n", "a cell starts two sleeps that would "
	    "outlive it");
	ok(count_procs(0, m1) == 1 && count_procs(0, m2) == 1,
	    "control: the host sees both");
	t0 = mono_us();
	sandbox_local_destroy(&k->sb);
	printf("# destroy with two daemons: %.1f ms\n",
	    (mono_us() - t0) / 1000.0);
	is_int(count_procs(0, m1) + count_procs(0, m2), 0,
	    "after destroy neither exists");
	is_int(count_procs(uid, NULL), 0, "nor any process of uid %ld",
	    (long)uid);
	ok(k->sb.pid == -1 && k->sb.in == -1 && k->sb.out == -1 &&
	    k->sb.err == -1, "destroy clears the sandbox");
	sandbox_local_destroy(&k->sb);
	ok(k->sb.pid == -1, "and a second destroy is a no-op");
}

static void
test_fork_bomb(void)
{
	struct sandbox_spec	 spec;
	struct kern		*k;
	struct cell		 c;
	int64_t			 t0;
	pid_t			 pid;
	int			 st, n;

	k = calloc(1, sizeof(*k));
	limits_default(&spec, SLOT + 2, NULL);
	spec.limits.processes = 32;
	if (k == NULL || kern_start(k, &spec, NULL, NULL) == -1) {
		ok(0, "fork bomb sandbox starts");
		free(k);
		return;
	}
	cell(k, "import os, time\n"
	    "n, err = 0, None\n"
	    "try:\n"
	    "    while True:\n"
	    "        if os.fork() == 0:\n"
	    "            while True:\n"
	    "                try:\n"
	    "                    os.fork()\n"
	    "                except OSError:\n"
	    "                    time.sleep(0.05)\n"
	    "        n += 1\n"
	    "except OSError as e:\n"
	    "    err = e\n"
	    "print(type(err).__name__, err.errno, n > 0)", &c, CELL_MS);
	is_str(c.out, "BlockingIOError 11 True\n",
	    "a fork bomb hits the sandbox's process limit (EAGAIN)");
	n = count_procs(UID(SLOT + 2), NULL);
	ok(n > 0 && n <= spec.limits.processes + 3,
	    "the slot's uid holds %d processes, at most processes + 3", n);
	if ((pid = fork()) == 0)
		_exit(0);
	ok(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st),
	    "the host still forks");
	cell(k, "print('alive')", &c, CELL_MS);
	is_str(c.out, "alive\n", "the kernel still answers");
	t0 = mono_us();
	kern_stop(k);
	printf("# destroy of a fork bomb: %.1f ms\n",
	    (mono_us() - t0) / 1000.0);
	is_int(count_procs(UID(SLOT + 2), NULL), 0,
	    "after destroy no process of the bomb's uid is left");
	free(k);
}

static void
test_cpu(void)
{
	struct sandbox_spec	 spec;
	struct kern		*k;
	struct pollfd		 pfd;
	siginfo_t		 si;
	char			 line[1024];
	int64_t			 t0;
	int			 rc, events = 0;

	k = calloc(1, sizeof(*k));
	limits_default(&spec, SLOT + 3, NULL);
	spec.limits.cpu_seconds = 2;
	if (k == NULL || kern_start(k, &spec, NULL, NULL) == -1) {
		ok(0, "cpu sandbox starts");
		free(k);
		return;
	}
	t0 = mono_us();
	kern_send(k, "{\"type\":\"execute\",\"id\":\"spin\","
	    "\"code\":\"while True: pass\"}\n");
	while ((rc = kern_line(k, line, sizeof(line), CELL_MS)) == 1)
		if (strstr(line, "\"event\":\"done\"") != NULL)
			events++;
	is_int(rc, 0, "an endless loop ends at EOF: the kernel died");
	is_int(events, 0, "without a done");
	printf("# the kernel died %.2f s after the loop began "
	    "(cpu_seconds 2)\n", (mono_us() - t0) / 1e6);
	memset(&si, 0, sizeof(si));
	pfd.fd = pidfd_open(k->sb.pid, 0);
	pfd.events = POLLIN;
	ok(pfd.fd != -1 && poll(&pfd, 1, CELL_MS) == 1 &&
	    waitid(P_PID, k->sb.pid, &si, WEXITED | WNOWAIT) == 0,
	    "the keeper exits on its own");
	if (pfd.fd != -1)
		close(pfd.fd);
	ok(si.si_code == CLD_EXITED && si.si_status == 128 + SIGXCPU,
	    "with 128 + SIGXCPU: RLIMIT_CPU killed the kernel (code %d, "
	    "status %d)", si.si_code, si.si_status);
	kern_stop(k);
	is_int(count_procs(UID(SLOT + 3), NULL), 0, "nothing is left");
	free(k);
}

/* A process left running as a slot's uid dies when the slot is reused. */
static void
test_leftover(void)
{
	struct sandbox_spec	 spec;
	struct kern		*k;
	struct pollfd		 pfd;
	char			 c;
	pid_t			 pid;
	uid_t			 uid = UID(SLOT + 5);
	char			 secs[16], marker[32];
	int			 p[2], st = 0;

	if ((k = calloc(1, sizeof(*k))) == NULL || pipe2(p, O_CLOEXEC) == -1)
		return;
	snprintf(secs, sizeof(secs), "%d", 1000002 + slot_base);
	snprintf(marker, sizeof(marker), "sleep %s", secs);
	if ((pid = fork()) == 0) {
		if (setgroups(0, NULL) == 0 && setresgid(uid, uid, uid) == 0 &&
		    setresuid(uid, uid, uid) == 0)
			execl("/usr/bin/sleep", "sleep", secs, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	ok(pid > 0 && read(p[0], &c, 1) == 0 && count_procs(0, marker) == 1,
	    "control: a process runs as uid %ld", (long)uid);
	close(p[0]);
	limits_default(&spec, SLOT + 5, NULL);
	ok(kern_start(k, &spec, NULL, NULL) == 0, "its slot's sandbox starts");
	pfd.fd = pidfd_open(pid, 0);
	pfd.events = POLLIN;
	if (pfd.fd == -1 || poll(&pfd, 1, READY_MS) != 1)
		kill(pid, SIGKILL);
	if (pfd.fd != -1)
		close(pfd.fd);
	waitpid(pid, &st, 0);
	ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	    "and the leftover was killed when the slot was taken");
	kern_stop(k);
	free(k);
}

static void
test_timing(void)
{
	struct sandbox_spec	 spec;
	struct kern		*k;
	int64_t			 box[RUNS], direct[RUNS], destroy[RUNS];
	int64_t			 spawn[RUNS], dspawn[RUNS], t0;
	int			 i, fails = 0;

	k = calloc(1, sizeof(*k));
	if (k == NULL)
		return;
	limits_default(&spec, SLOT + 4, NULL);
	for (i = 0; i < RUNS; i++) {
		k->direct = 0;
		if (kern_start(k, &spec, &spawn[i], &box[i]) == -1)
			fails++;
		t0 = mono_us();
		kern_stop(k);
		destroy[i] = mono_us() - t0;
		k->direct = 1;
		if (kern_start(k, &spec, &dspawn[i], &direct[i]) == -1)
			fails++;
		kern_stop(k);
	}
	is_int(fails, 0, "%d sandboxed and %d direct kernels got ready",
	    RUNS, RUNS);
	printf("# spawn to ready, median of %d: sandboxed %.1f ms, direct "
	    "%.1f ms\n", RUNS, median_ms(box, RUNS), median_ms(direct, RUNS));
	printf("# of which spawn itself returned after: sandboxed %.1f ms, "
	    "direct %.1f ms\n", median_ms(spawn, RUNS),
	    median_ms(dspawn, RUNS));
	printf("# destroy of an idle sandbox, median of %d: %.1f ms\n", RUNS,
	    median_ms(destroy, RUNS));
	free(k);
}

int
main(void)
{
	static const char *const	 env[] = {
		"FLEET_LEASE=lease-1", NULL
	};
	struct sandbox_spec		 spec;
	struct kern			*k, *direct;
	char				 vol_a[PATH_MAX], vol_b[PATH_MAX];
	int				 fds;

	signal(SIGPIPE, SIG_IGN);
	slot_base = 40000 + getpid() % 3000 * 8;
	if (geteuid() != 0) {
		printf("1..0 # SKIP sandbox tests need root\n");
		return 0;
	}
	if (realpath("kernel/fleet_kernel.py", kernel) == NULL) {
		printf("Bail out! run from the top of the tree\n");
		return 1;
	}
	snprintf(base, sizeof(base), "/tmp/fleet-sandbox-test.XXXXXX");
	/* Searchable by the slots' uids, which bwrap resolves volumes as. */
	if (mkdtemp(base) == NULL || chmod(base, 0711) == -1) {
		printf("Bail out! mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	atexit(rm_base);
	snprintf(vol_a, sizeof(vol_a), "%s/a", base);
	snprintf(vol_b, sizeof(vol_b), "%s/b", base);
	if (mkdir(vol_a, 0700) == -1 || mkdir(vol_b, 0700) == -1) {
		printf("Bail out! mkdir: %s\n", strerror(errno));
		return 1;
	}
	setenv("FLEET_TEST_HOST_SECRET", "leak", 1);
	fds = count_fds();

	test_probe();
	test_probe_refuses();
	test_spec_errors();

	k = calloc(1, sizeof(*k));
	direct = calloc(1, sizeof(*direct));
	if (k == NULL || direct == NULL)
		return 1;
	direct->direct = 1;
	limits_default(&spec, SLOT, vol_a);
	spec.env = env;
	ok(kern_start(k, &spec, NULL, NULL) == 0,
	    "a sandboxed kernel says ready");
	ok(kern_start(direct, &spec, NULL, NULL) == 0,
	    "a direct kernel (the control) says ready");
	test_network(k);
	test_filesystem(k, vol_a, UID(SLOT));
	test_other_volume(vol_a, vol_b);
	test_seccomp(k, direct);
	test_env(k);
	test_memory(k);
	test_outlive(k, UID(SLOT));
	kern_stop(direct);
	free(k);
	free(direct);

	test_fork_bomb();
	test_cpu();
	test_leftover();
	test_timing();

	is_int(count_fds(), fds, "no descriptor leaked");
	return done_testing();
}
