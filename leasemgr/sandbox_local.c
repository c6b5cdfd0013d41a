/*
 * The local sandbox backend: one kernel under bubblewrap, with a seccomp
 * filter, rlimits and, as root, a uid of its own.  The process tree is
 *
 *	caller - keeper - bwrap - bwrap (pid 1 inside) - kernel (pid 2) - ...
 *
 * The keeper is forked, never exec'd.  It is a child subreaper, so when
 * the outer bwrap dies, the inner one (the pid namespace's init) comes to
 * it rather than to the host's init; it kills what is left once bwrap
 * exits or the caller asks, and it exits only when it has no child left.
 * Killing the init of a pid namespace kills everything in it, and as root
 * kill(-1) from the sandbox's own uid is one atomic sweep that a fork
 * bomb cannot outrun.
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <seccomp.h>

#include "lib/log.h"
#include "lib/util.h"
#include "sandbox.h"

#define PRLIMIT		"/usr/bin/prlimit"
#define PROBE_MS	5000
#define ERRMSG_MAX	256

/* Descriptors the exec'd bwrap finds at fixed numbers. */
enum {
	CFD_STDIN,
	CFD_STDOUT,
	CFD_STDERR,
	CFD_SECCOMP,
	CFD_KERNEL,
	CFD__COUNT
};
#define CFD_STATUS	CFD__COUNT	/* close-on-exec, for exec errors */
#define CFD_SECCOMP_S	"3"
#define CFD_KERNEL_S	"4"

struct argv {
	char	**v;
	size_t	  n;
	size_t	  cap;
};

struct launch {
	struct argv			 argv;
	const struct sandbox_limits	*limits;
	const char			*volume;
	int				 cfd[CFD__COUNT];
	int				 status[2];
	int				 ours[3];	/* in, out, err */
	uid_t				 uid;
	gid_t				 gid;
	int				 own_uid;	/* root: uid per slot */
	int				 sweep;		/* kill(-1) as it */
	pid_t				 parent;
	pid_t				 keeper;
};

static void	argv_addl(struct argv *, ...) __attribute__((sentinel));
static void	argv_free(struct argv *);
static int	bwrap_argv(struct argv *, const struct sandbox_spec *,
		    const char *const *, int, char *, size_t);
static int	seccomp_pipe(char *, size_t);
static int	spec_check(const struct sandbox_spec *, char *, size_t);
static int	volume_prepare(const char *, uid_t, gid_t, char *, size_t);
static int	sandbox_start(const struct sandbox_spec *, const char *const *,
		    struct sandbox *, char *, size_t);
static int	sandbox_finish(struct sandbox *);
static int	reap(pid_t, int, int *);
static void	launch_close(struct launch *);
static void	child_fail(int, const char *) __attribute__((noreturn));
static void	close_except(const int *, size_t);
static void	keeper_main(struct launch *) __attribute__((noreturn));
static void	keeper_loop(pid_t, int) __attribute__((noreturn));
static void	keeper_kill(pid_t, int);
static void	bwrap_exec(struct launch *) __attribute__((noreturn));
static void	closefd(int *);

/* Cleared by the probe when this bwrap predates --disable-userns. */
static int	bwrap_disable_userns = 1;

/*
 * Denied with EPERM: looking into other processes, namespaces and
 * mounts, kernel keyrings, modules, BPF, perf, userfaultfd, kexec,
 * file handles (they bypass the mount tree) and io_uring.  Most already
 * fail without capabilities; the filter holds if one of them does not.
 */
static const char *const seccomp_eperm[] = {
	"ptrace", "process_vm_readv", "process_vm_writev",
	"process_madvise", "pidfd_getfd", "kcmp",
	"mount", "umount2", "pivot_root", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
	"open_tree", "mount_setattr",
	"keyctl", "add_key", "request_key",
	"bpf", "perf_event_open", "userfaultfd",
	"kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module",
	"open_by_handle_at", "name_to_handle_at",
	"io_uring_setup", "io_uring_enter", "io_uring_register"
};

/* Namespace flags of clone(2).  CLONE_NEWTIME overlaps its exit signal. */
static const unsigned long clone_newns[] = {
	CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
	CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET
};

/* Host entries that are symlinks into /usr (merged /usr) or directories. */
static const char *const sysdirs[] = {
	"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"
};

/* Append strings up to a NULL. */
static void
argv_addl(struct argv *a, ...)
{
	const char	*s;
	va_list		 ap;

	va_start(ap, a);
	while ((s = va_arg(ap, const char *)) != NULL) {
		if (a->n + 2 > a->cap) {
			a->cap = a->cap ? a->cap * 2 : 128;
			a->v = xreallocarray(a->v, a->cap, sizeof(*a->v));
		}
		a->v[a->n++] = xstrdup(s);
		a->v[a->n] = NULL;
	}
	va_end(ap);
}

static void
argv_free(struct argv *a)
{
	size_t	 i;

	for (i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	memset(a, 0, sizeof(*a));
}

/*
 * The whole bwrap command line.  cmd replaces the kernel (the probe);
 * own_uid says whether RLIMIT_NPROC is per uid already or must be set
 * inside the user namespace.
 */
static int
bwrap_argv(struct argv *a, const struct sandbox_spec *spec,
    const char *const *cmd, int own_uid, char *err, size_t errsz)
{
	const struct sandbox_limits	*lim = &spec->limits;
	const char *const		*e;
	struct stat			 st;
	char				 target[PATH_MAX], size[32], *name;
	ssize_t				 n;
	size_t				 i;

	snprintf(size, sizeof(size), "%lld", (long long)lim->tmp_size);
	argv_addl(a, SANDBOX_BWRAP, "--unshare-all", "--unshare-user", NULL);
	if (bwrap_disable_userns)
		argv_addl(a, "--disable-userns", NULL);
	argv_addl(a, "--die-with-parent", "--new-session", "--cap-drop", "ALL",
	    "--hostname", "fleet", NULL);

	argv_addl(a, "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
	    "--setenv", "HOME", SANDBOX_WORKSPACE,
	    "--setenv", "LANG", "C.UTF-8", NULL);
	for (e = spec->env; e != NULL && *e != NULL; e++) {
		name = xstrndup(*e, strcspn(*e, "="));
		argv_addl(a, "--setenv", name, *e + strlen(name) + 1, NULL);
		free(name);
	}

	argv_addl(a, "--ro-bind", "/usr", "/usr", NULL);
	for (i = 0; i < sizeof(sysdirs) / sizeof(sysdirs[0]); i++) {
		if (lstat(sysdirs[i], &st) == -1)
			continue;
		if (S_ISDIR(st.st_mode))
			argv_addl(a, "--ro-bind", sysdirs[i], sysdirs[i], NULL);
		if (!S_ISLNK(st.st_mode))
			continue;
		if ((n = readlink(sysdirs[i], target,
		    sizeof(target) - 1)) == -1) {
			snprintf(err, errsz, "readlink %s: %s", sysdirs[i],
			    strerror(errno));
			return -1;
		}
		target[n] = '\0';
		argv_addl(a, "--symlink", target, sysdirs[i], NULL);
	}
	/* Not the host's /etc: only what the loader and python3 use. */
	argv_addl(a, "--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
	    "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache", NULL);

	/* bwrap's /dev is a writable tmpfs: bound /dev/shm, freeze the rest. */
	argv_addl(a, "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm",
	    "--remount-ro", "/dev", "--proc", "/proc",
	    "--size", size, "--tmpfs", "/tmp", NULL);
	if (spec->volume != NULL)
		argv_addl(a, "--bind", spec->volume, SANDBOX_WORKSPACE, NULL);
	else
		argv_addl(a, "--size", size, "--tmpfs", SANDBOX_WORKSPACE,
		    NULL);
	/* A copy: the kernel's path need not be reachable by the sandbox. */
	if (spec->kernel != NULL)
		argv_addl(a, "--ro-bind-data", CFD_KERNEL_S, SANDBOX_KERNEL,
		    NULL);
	argv_addl(a, "--remount-ro", "/", "--chdir", SANDBOX_WORKSPACE,
	    "--seccomp", CFD_SECCOMP_S, "--", NULL);

	if (!own_uid) {
		/* Counted per (user namespace, uid): this sandbox only. */
		snprintf(target, sizeof(target), "--nproc=%d:%d",
		    lim->processes + 1, lim->processes + 1);
		argv_addl(a, PRLIMIT, target, "--", NULL);
	}
	if (cmd != NULL) {
		for (; *cmd != NULL; cmd++)
			argv_addl(a, *cmd, NULL);
	} else
		argv_addl(a, spec->python, "-I", "-S", SANDBOX_KERNEL, NULL);
	return 0;
}

/*
 * Compile the filter and return the read end of a pipe holding it, for
 * bwrap --seccomp.  The program is well under a pipe's buffer, so the
 * export cannot block.  Default allow; non-native architectures, x32
 * included, kill the process.
 */
static int
seccomp_pipe(char *err, size_t errsz)
{
	scmp_filter_ctx	 ctx;
	size_t		 i;
	int		 p[2] = { -1, -1 }, nr, rc;

	if ((ctx = seccomp_init(SCMP_ACT_ALLOW)) == NULL) {
		snprintf(err, errsz, "seccomp_init failed");
		return -1;
	}
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH,
	    SCMP_ACT_KILL_PROCESS);
	for (i = 0; rc == 0 && i < sizeof(seccomp_eperm) /
	    sizeof(seccomp_eperm[0]); i++) {
		nr = seccomp_syscall_resolve_name(seccomp_eperm[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;	/* older libseccomp */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	/*
	 * personality(0xffffffff) only reads the persona.  The kernel takes
	 * an unsigned int, so deny a clear bit among the low 32, whatever
	 * the upper half holds.
	 */
	for (i = 0; rc == 0 && i < 32; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
		    SCMP_SYS(personality), 1,
		    SCMP_A0(SCMP_CMP_MASKED_EQ, 1UL << i, 0));
	/* The command is an int: compare only its low 32 bits. */
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
		    SCMP_SYS(ioctl), 1,
		    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, TIOCSTI));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
		    SCMP_SYS(ioctl), 1,
		    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, TIOCLINUX));
	for (i = 0; rc == 0 && i < sizeof(clone_newns) /
	    sizeof(clone_newns[0]); i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
		    SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ,
		    clone_newns[i], clone_newns[i]));
	/* clone3 passes its flags in memory; libc falls back to clone. */
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS),
		    SCMP_SYS(clone3), 0);
	if (rc != 0) {
		snprintf(err, errsz, "seccomp rule: %s", strerror(-rc));
		goto fail;
	}
	if (pipe2(p, O_CLOEXEC) == -1) {
		snprintf(err, errsz, "pipe: %s", strerror(errno));
		goto fail;
	}
	if ((rc = seccomp_export_bpf(ctx, p[1])) != 0) {
		snprintf(err, errsz, "seccomp_export_bpf: %s", strerror(-rc));
		goto fail;
	}
	close(p[1]);
	seccomp_release(ctx);
	return p[0];
 fail:
	closefd(&p[0]);
	closefd(&p[1]);
	seccomp_release(ctx);
	return -1;
}

static int
spec_check(const struct sandbox_spec *spec, char *err, size_t errsz)
{
	const struct sandbox_limits	*lim = &spec->limits;
	const char *const		*e;
	const char			*p;
	size_t				 n = 0;

	/* /usr is the only host tree inside; bwrap resolves from /. */
	if (spec->kernel == NULL || spec->python == NULL ||
	    strncmp(spec->python, "/usr/", 5) != 0) {
		snprintf(err, errsz, "a kernel and a python under /usr/ are "
		    "required");
		return -1;
	}
	if (spec->volume != NULL && spec->volume[0] != '/') {
		snprintf(err, errsz, "volume %s: not an absolute path",
		    spec->volume);
		return -1;
	}
	if (spec->slot < 0 || spec->slot >= SANDBOX_SLOTS) {
		snprintf(err, errsz, "slot %d out of range", spec->slot);
		return -1;
	}
	if (lim->cpu_seconds < 1 || lim->address_space < 1 ||
	    lim->open_files < 1 || lim->file_size < 1 ||
	    lim->processes < 1 || lim->processes > INT_MAX - 3 ||
	    lim->tmp_size < 1) {
		snprintf(err, errsz, "every limit must be positive");
		return -1;
	}
	if (lim->processes < SANDBOX_KERNEL_TASKS) {
		snprintf(err, errsz, "processes must be at least %d, the "
		    "kernel's own threads", SANDBOX_KERNEL_TASKS);
		return -1;
	}
	for (e = spec->env; e != NULL && *e != NULL; e++) {
		if (++n > SANDBOX_ENV_MAX ||
		    strnlen(*e, SANDBOX_ENV_LEN) == SANDBOX_ENV_LEN) {
			snprintf(err, errsz, "too many or too long "
			    "environment entries");
			return -1;
		}
		for (p = *e; *p == '_' || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= 'a' && *p <= 'z') || (p > *e && *p >= '0' &&
		    *p <= '9'); p++)
			;
		if (p == *e || *p != '=') {
			snprintf(err, errsz, "bad environment entry "
			    "\"%.32s\"", *e);
			return -1;
		}
	}
	return 0;
}

/*
 * As root, the volume belongs to root and to the sandboxes' group, and
 * is group-writable and setgid: every slot (each its own uid, all in the
 * one group, with umask 007) can then use what another slot left there,
 * and two sandboxes can share a workspace.  bwrap resolves the path as
 * the slot's uid, so the directories above it must be searchable by it.
 */
static int
volume_prepare(const char *path, uid_t uid, gid_t gid, char *err,
    size_t errsz)
{
	struct stat	 st;
	int		 fd, rc = -1;

	(void)uid;
	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1 ||
	    fstat(fd, &st) == -1)
		snprintf(err, errsz, "volume %s: %s", path, strerror(errno));
	else if ((st.st_uid != 0 || st.st_gid != gid) &&
	    fchown(fd, 0, gid) == -1)
		snprintf(err, errsz, "chown %s: %s", path, strerror(errno));
	else if ((st.st_mode & 07777) != 02770 && fchmod(fd, 02770) == -1)
		snprintf(err, errsz, "chmod %s: %s", path, strerror(errno));
	else
		rc = 0;
	closefd(&fd);
	return rc;
}

int
sandbox_local_probe(char *err, size_t errsz)
{
	static const char *const	 cmd[] = { "/usr/bin/true", NULL };
	struct sandbox_spec		 spec;
	struct sandbox			 sb;
	struct pollfd			 pfd;
	char				 msg[ERRMSG_MAX], *nl;
	size_t				 len;
	ssize_t				 n;
	int64_t				 deadline;
	int				 status, rc;

	if (access(SANDBOX_BWRAP, X_OK) == -1) {
		snprintf(err, errsz, "%s: %s: bubblewrap is required to run "
		    "code", SANDBOX_BWRAP, strerror(errno));
		return -1;
	}
	memset(&spec, 0, sizeof(spec));
	spec.slot = -1;		/* the uid below every slot's */
	spec.limits.cpu_seconds = 10;
	spec.limits.address_space = (int64_t)1 << 30;
	spec.limits.open_files = 64;
	spec.limits.file_size = 1 << 20;
	spec.limits.processes = 16;
	spec.limits.tmp_size = 1 << 20;
	for (;;) {
		if (sandbox_start(&spec, cmd, &sb, err, errsz) == -1)
			return -1;
		len = 0;
		pfd.fd = sb.err;
		pfd.events = POLLIN;
		deadline = now_ms() + PROBE_MS;
		while (now_ms() < deadline) {
			rc = poll(&pfd, 1, (int)(deadline - now_ms()));
			if (rc == -1 && errno == EINTR)
				continue;
			if (rc <= 0)
				break;
			n = read(sb.err, msg + len, sizeof(msg) - 1 - len);
			if (n == -1 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			len += n;
			if (len == sizeof(msg) - 1)
				break;
		}
		msg[len] = '\0';
		status = sandbox_finish(&sb);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			return 0;
		if (bwrap_disable_userns && strstr(msg, "disable-userns")) {
			bwrap_disable_userns = 0;
			continue;
		}
		if ((nl = strchr(msg, '\n')) != NULL)
			*nl = '\0';
		snprintf(err, errsz, "bubblewrap cannot make a sandbox here "
		    "(are unprivileged user namespaces disabled?), so no code "
		    "can run: %s", len ? msg : "no message from bwrap");
		return -1;
	}
}

int
sandbox_local_spawn(const struct sandbox_spec *spec, struct sandbox *sb,
    char *err, size_t errsz)
{
	sb->pid = -1;
	sb->in = sb->out = sb->err = -1;
	if (spec_check(spec, err, errsz) == -1)
		return -1;
	return sandbox_start(spec, NULL, sb, err, errsz);
}

static int
sandbox_start(const struct sandbox_spec *spec, const char *const *cmd,
    struct sandbox *sb, char *err, size_t errsz)
{
	uid_t		 base;
	struct launch	 l;
	sigset_t	 all, old;
	char		 msg[ERRMSG_MAX];
	ssize_t		 n;
	size_t		 len = 0;
	pid_t		 pid;
	int		 i, p[2];

	sb->pid = -1;
	sb->in = sb->out = sb->err = -1;
	memset(&l, 0, sizeof(l));
	for (i = 0; i < CFD__COUNT; i++)
		l.cfd[i] = -1;
	l.status[0] = l.status[1] = -1;
	l.ours[0] = l.ours[1] = l.ours[2] = -1;
	l.limits = &spec->limits;
	l.parent = getpid();
	l.own_uid = geteuid() == 0;
	l.sweep = l.own_uid && spec->slot >= 0;	/* probes may overlap */
	base = spec->uid_base != 0 ? spec->uid_base : SANDBOX_UID_BASE;
	l.uid = l.own_uid ? (uid_t)(base + spec->slot) : getuid();
	/* One group for all slots: they share the workspace volumes. */
	l.gid = l.own_uid ? (gid_t)base : getgid();

	if (!l.own_uid && access(PRLIMIT, X_OK) == -1) {
		snprintf(err, errsz, "%s: %s: needed to bound processes when "
		    "not root", PRLIMIT, strerror(errno));
		goto fail;
	}
	if (bwrap_argv(&l.argv, spec, cmd, l.own_uid, err, errsz) == -1)
		goto fail;
	if (spec->kernel != NULL && (l.cfd[CFD_KERNEL] = open(spec->kernel,
	    O_RDONLY | O_CLOEXEC)) == -1) {
		snprintf(err, errsz, "kernel %s: %s", spec->kernel,
		    strerror(errno));
		goto fail;
	}
	l.volume = spec->volume;
	if (l.volume != NULL && l.own_uid &&
	    volume_prepare(l.volume, l.uid, l.gid, err, errsz) == -1)
		goto fail;
	if ((l.cfd[CFD_SECCOMP] = seccomp_pipe(err, errsz)) == -1)
		goto fail;
	for (i = 0; i < 3; i++) {
		if (pipe2(p, O_CLOEXEC) == -1) {
			snprintf(err, errsz, "pipe: %s", strerror(errno));
			goto fail;
		}
		l.cfd[i] = i == CFD_STDIN ? p[0] : p[1];
		l.ours[i] = i == CFD_STDIN ? p[1] : p[0];
	}
	if (pipe2(l.status, O_CLOEXEC) == -1) {
		snprintf(err, errsz, "pipe: %s", strerror(errno));
		goto fail;
	}

	/* No handler of ours may run in the keeper before it resets them. */
	sigfillset(&all);
	if (sigprocmask(SIG_SETMASK, &all, &old) == -1) {
		snprintf(err, errsz, "sigprocmask: %s", strerror(errno));
		goto fail;
	}
	if ((pid = fork()) == 0)
		keeper_main(&l);
	if (pid == -1)
		snprintf(err, errsz, "fork: %s", strerror(errno));
	if (sigprocmask(SIG_SETMASK, &old, NULL) == -1)
		fatal("%s: sigprocmask", __func__);
	if (pid == -1)
		goto fail;

	/* EOF once bwrap is exec'd; bytes if something failed before. */
	closefd(&l.status[1]);
	for (i = 0; i < CFD__COUNT; i++)
		closefd(&l.cfd[i]);
	while (len < sizeof(msg) - 1) {
		n = read(l.status[0], msg + len, sizeof(msg) - 1 - len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += n;
	}
	msg[len] = '\0';
	sb->pid = pid;
	sb->in = l.ours[0];
	sb->out = l.ours[1];
	sb->err = l.ours[2];
	l.ours[0] = l.ours[1] = l.ours[2] = -1;
	launch_close(&l);
	if (len > 0) {
		snprintf(err, errsz, "sandbox: %s", msg);
		sandbox_finish(sb);
		return -1;
	}
	return 0;
 fail:
	launch_close(&l);
	return -1;
}

static void
launch_close(struct launch *l)
{
	int	 i;

	for (i = 0; i < CFD__COUNT; i++)
		closefd(&l->cfd[i]);
	for (i = 0; i < 3; i++)
		closefd(&l->ours[i]);
	closefd(&l->status[0]);
	closefd(&l->status[1]);
	argv_free(&l->argv);
}

void
sandbox_local_destroy(struct sandbox *sb)
{
	sandbox_finish(sb);
}

/* Destroy, and return the keeper's wait status (or -1). */
static int
sandbox_finish(struct sandbox *sb)
{
	int	 status = -1, rc;

	if (sb->pid > 0) {
		if (kill(sb->pid, SIGTERM) == -1)
			log_warn("sandbox keeper %ld: kill", (long)sb->pid);
		if ((rc = reap(sb->pid, SANDBOX_DESTROY_MS, &status)) == -1)
			log_warn("sandbox keeper %ld: waitpid", (long)sb->pid);
		if (rc == 0) {
			log_warnx("sandbox keeper %ld still runs after %d ms; "
			    "killing it", (long)sb->pid, SANDBOX_DESTROY_MS);
			if (kill(sb->pid, SIGKILL) == -1)
				log_warn("sandbox keeper %ld: kill",
				    (long)sb->pid);
			if (reap(sb->pid, -1, &status) == -1)
				log_warn("sandbox keeper %ld: waitpid",
				    (long)sb->pid);
		}
		sb->pid = -1;
	}
	closefd(&sb->in);
	closefd(&sb->out);
	closefd(&sb->err);
	return status;
}

/*
 * Wait for our child pid for up to ms (forever if negative).  1 when
 * reaped, 0 if it still runs, -1 if it is not ours to wait for.
 */
static int
reap(pid_t pid, int ms, int *status)
{
	struct timespec	 tick = { 0, 1000000 };
	struct pollfd	 pfd;
	int64_t		 deadline = now_ms() + ms;
	pid_t		 r;
	int		 rc;

	if (ms >= 0 && (pfd.fd = pidfd_open(pid, 0)) != -1) {
		pfd.events = POLLIN;
		do
			rc = poll(&pfd, 1, (int)(deadline > now_ms() ?
			    deadline - now_ms() : 0));
		while (rc == -1 && errno == EINTR);
		close(pfd.fd);
		if (rc <= 0)
			return 0;
	} else if (ms >= 0) {
		/* No pidfd (before Linux 5.3, or out of descriptors). */
		while ((r = waitpid(pid, status, WNOHANG)) == 0) {
			if (now_ms() >= deadline)
				return 0;
			(void)nanosleep(&tick, NULL);
		}
		return r == pid ? 1 : -1;
	}
	do
		r = waitpid(pid, status, 0);
	while (r == -1 && errno == EINTR);
	return r == pid ? 1 : -1;
}

/* Write why we failed where the caller reads it, and go. */
static void
child_fail(int fd, const char *what)
{
	char	 msg[ERRMSG_MAX];
	int	 n;

	n = snprintf(msg, sizeof(msg), "%s: %s", what, strerror(errno));
	if (n > 0 && write(fd, msg, (size_t)n < sizeof(msg) ? (size_t)n :
	    sizeof(msg) - 1) == -1)
		_exit(127);
	_exit(127);
}

/* Close every descriptor above 2 that is not in keep[]. */
static void
close_except(const int *keep, size_t n)
{
	int	 fds[CFD__COUNT + 1], t;
	size_t	 i, j, m = 0;
	int	 lo = 3;

	for (i = 0; i < n && m < sizeof(fds) / sizeof(fds[0]); i++)
		if (keep[i] >= 3)
			fds[m++] = keep[i];
	for (i = 1; i < m; i++)
		for (j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
			t = fds[j];
			fds[j] = fds[j - 1];
			fds[j - 1] = t;
		}
	for (i = 0; i < m; i++) {
		if (fds[i] > lo)
			(void)close_range(lo, fds[i] - 1, 0);
		if (fds[i] >= lo)
			lo = fds[i] + 1;
	}
	(void)close_range(lo, ~0U, 0);
}

/* The keeper: a forked child of the caller, with every signal blocked. */
static void
keeper_main(struct launch *l)
{
	struct sigaction	 sa;
	char			 what[ERRMSG_MAX];
	int			 keep[CFD__COUNT + 1], i, sig, e;
	pid_t			 pid;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)sigaction(sig, &sa, NULL);
	for (i = 0; i < CFD__COUNT; i++)
		keep[i] = l->cfd[i];
	keep[CFD__COUNT] = l->status[1];
	for (i = 0; i < 3; i++)
		closefd(&l->ours[i]);
	closefd(&l->status[0]);
	close_except(keep, CFD__COUNT + 1);

	if (setsid() == -1)
		child_fail(l->status[1], "setsid");
	if (chdir("/") == -1)
		child_fail(l->status[1], "chdir /");
	umask(007);
	if (l->own_uid) {
		if (setgroups(0, NULL) == -1)
			child_fail(l->status[1], "setgroups");
		if (setresgid(l->gid, l->gid, l->gid) == -1)
			child_fail(l->status[1], "setresgid");
		/* This also makes us undumpable: the uid cannot read us. */
		if (setresuid(l->uid, l->uid, l->uid) == -1)
			child_fail(l->status[1], "setresuid");
	}
	/* Anything still running as this uid is a slot's leftover. */
	if (l->sweep)
		(void)kill(-1, SIGKILL);
	if (l->volume != NULL &&
	    access(l->volume, R_OK | W_OK | X_OK) == -1) {
		e = errno;
		snprintf(what, sizeof(what), "volume %s as uid %ld",
		    l->volume, (long)l->uid);
		errno = e;
		child_fail(l->status[1], what);
	}
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) == -1)
		child_fail(l->status[1], "PR_SET_CHILD_SUBREAPER");
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1)
		child_fail(l->status[1], "PR_SET_PDEATHSIG");
	if (getppid() != l->parent)
		_exit(127);

	l->keeper = getpid();
	if ((pid = fork()) == 0)
		bwrap_exec(l);
	if (pid == -1)
		child_fail(l->status[1], "fork");
	for (i = 0; i < CFD__COUNT; i++)
		closefd(&l->cfd[i]);
	closefd(&l->status[1]);
	keeper_loop(pid, l->sweep);
}

/*
 * Reap until no child is left.  Once bwrap has exited or the caller
 * has sent SIGTERM, kill whatever remains, again after each death.
 */
static void
keeper_loop(pid_t bwrap, int sweep)
{
	sigset_t	 set;
	siginfo_t	 si;
	pid_t		 pid;
	int		 st, code = 255, dying = 0;

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	for (;;) {
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			if (pid != bwrap)
				continue;
			code = WIFEXITED(st) ? WEXITSTATUS(st) :
			    128 + WTERMSIG(st);
			bwrap = -1;
			dying = 1;
		}
		if (pid == -1 && errno == ECHILD)
			_exit(code);
		if (dying)
			keeper_kill(bwrap, sweep);
		if (sigwaitinfo(&set, &si) == SIGTERM)
			dying = 1;
	}
}

/*
 * As the slot's uid, kill(-1) reaches every process of the sandbox at
 * once (fork cannot race it).  Our own children are bwrap and, once
 * bwrap is gone, the namespace's init: their pids cannot be reused
 * before we reap them, and killing that init ends the namespace.
 */
static void
keeper_kill(pid_t bwrap, int sweep)
{
	char	 buf[512], *p, *ep;
	ssize_t	 n;
	long	 pid;
	int	 fd;

	if (sweep)
		(void)kill(-1, SIGKILL);
	if (bwrap > 0)
		(void)kill(bwrap, SIGKILL);
	if ((fd = open("/proc/thread-self/children",
	    O_RDONLY | O_CLOEXEC)) == -1)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	for (p = buf; *p != '\0'; p = ep) {
		errno = 0;
		pid = strtol(p, &ep, 10);
		if (ep == p || errno != 0)
			break;
		if (pid > 0)
			(void)kill((pid_t)pid, SIGKILL);
	}
}

/* The keeper's child: descriptors at fixed numbers, rlimits, exec. */
static void
bwrap_exec(struct launch *l)
{
	const struct sandbox_limits	*lim = l->limits;
	static char			 envpath[] = "PATH=/usr/bin:/bin";
	char				*envp[] = { envpath, NULL };
	struct rlimit			 rl;
	sigset_t			 none;
	int				 hi[CFD__COUNT], st, i;

	st = fcntl(l->status[1], F_DUPFD_CLOEXEC, CFD_STATUS + 1);
	if (st == -1)
		child_fail(l->status[1], "fcntl");
	for (i = 0; i < CFD__COUNT; i++) {
		hi[i] = -1;
		if (l->cfd[i] != -1 && (hi[i] = fcntl(l->cfd[i],
		    F_DUPFD_CLOEXEC, CFD_STATUS + 1)) == -1)
			child_fail(st, "fcntl");
	}
	for (i = 0; i < CFD__COUNT; i++) {
		if (hi[i] == -1)
			(void)close(i);
		else if (dup2(hi[i], i) == -1)
			child_fail(st, "dup2");
	}
	if (dup3(st, CFD_STATUS, O_CLOEXEC) == -1)
		child_fail(st, "dup3");
	st = CFD_STATUS;
	if (close_range(CFD_STATUS + 1, ~0U, 0) == -1)
		child_fail(st, "close_range");

	rl.rlim_cur = lim->cpu_seconds;
	rl.rlim_max = (rlim_t)lim->cpu_seconds + 1;	/* then SIGKILL */
	if (setrlimit(RLIMIT_CPU, &rl) == -1)
		child_fail(st, "RLIMIT_CPU");
	rl.rlim_cur = rl.rlim_max = lim->address_space;
	if (setrlimit(RLIMIT_AS, &rl) == -1)
		child_fail(st, "RLIMIT_AS");
	rl.rlim_cur = rl.rlim_max = lim->open_files;
	if (setrlimit(RLIMIT_NOFILE, &rl) == -1)
		child_fail(st, "RLIMIT_NOFILE");
	rl.rlim_cur = rl.rlim_max = lim->file_size;
	if (setrlimit(RLIMIT_FSIZE, &rl) == -1)
		child_fail(st, "RLIMIT_FSIZE");
	rl.rlim_cur = rl.rlim_max = 0;
	if (setrlimit(RLIMIT_CORE, &rl) == -1)
		child_fail(st, "RLIMIT_CORE");
	if (l->own_uid) {
		/* The uid runs the keeper, both bwraps and the sandbox. */
		rl.rlim_cur = rl.rlim_max = (rlim_t)lim->processes + 3;
		if (setrlimit(RLIMIT_NPROC, &rl) == -1)
			child_fail(st, "RLIMIT_NPROC");
	}
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1)
		child_fail(st, "PR_SET_PDEATHSIG");
	if (getppid() != l->keeper)
		_exit(127);
	sigemptyset(&none);
	if (sigprocmask(SIG_SETMASK, &none, NULL) == -1)
		child_fail(st, "sigprocmask");
	execve(SANDBOX_BWRAP, l->argv.v, envp);
	child_fail(st, "execve " SANDBOX_BWRAP);
}

static void
closefd(int *fd)
{
	if (*fd != -1) {
		close(*fd);
		*fd = -1;
	}
}
