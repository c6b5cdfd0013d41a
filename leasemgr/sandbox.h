/*
 * Sandbox backends of the lease manager.  The local backend runs one
 * kernel (kernel/fleet_kernel.py) under bubblewrap with a seccomp filter
 * and rlimits; the pool, queue and leases sit above this and only use
 * the mechanism here.
 *
 * Identity.  When the lease manager runs as root, each sandbox runs as
 * its own unprivileged uid, base + slot (no passwd entry needed), so
 * that RLIMIT_NPROC counts that sandbox alone and so that destroy can
 * kill everything the uid owns; spawn first kills any process left
 * running as the slot's uid.  The base is the caller's (a lease manager
 * claims a range of its own, so two on one host never share a uid).
 * Every slot has the group base: the volume is made root:base, mode
 * 2770, and sandboxes run with umask 007, so sandboxes sharing a
 * workspace can all use its files.  bwrap resolves the volume's path as
 * the slot's uid, so the directories above it must be searchable by
 * others (0711 will do).  When not root, the sandbox runs as the
 * caller's uid and the volume is used as it is: the process limit then
 * holds inside the sandbox's user namespace only (prlimit(1) sets it
 * there), and destroy cannot sweep a uid, only the namespace.
 *
 * Process tree.  sb->pid is not bwrap itself but the sandbox's keeper:
 * a forked child of the caller, running as the sandbox uid, that is a
 * child subreaper and the parent of bwrap.  Every process of the sandbox
 * descends from it and nothing can be reparented out of its subtree, so
 * its exit means that no process of the sandbox is left.  It exits on
 * its own when the kernel dies (bwrap's status: 128 + N when the kernel
 * died of signal N), and at once when destroyed.  The caller must not
 * reap it with waitpid(-1); sandbox_local_destroy reaps it.
 */
#ifndef FLEET_SANDBOX_H
#define FLEET_SANDBOX_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

#define SANDBOX_UID_BASE	200000	/* the default base */
#define SANDBOX_SLOTS		65536	/* slots are 0 .. SANDBOX_SLOTS - 1 */
#define SANDBOX_BWRAP		"/usr/bin/bwrap"
#define SANDBOX_KERNEL		"/opt/fleet/fleet_kernel.py"	/* inside */
#define SANDBOX_WORKSPACE	"/workspace"			/* inside */
#define SANDBOX_ENV_MAX		64	/* entries in spec->env */
#define SANDBOX_ENV_LEN		8192	/* bytes of one entry */
#define SANDBOX_DESTROY_MS	2000	/* then the keeper is SIGKILLed */
#define SANDBOX_KERNEL_TASKS	5	/* the kernel's threads, counted */

struct sandbox_limits {
	int	 cpu_seconds;		/* RLIMIT_CPU of each process */
	int64_t	 address_space;		/* RLIMIT_AS, bytes */
	int	 open_files;		/* RLIMIT_NOFILE */
	int64_t	 file_size;		/* RLIMIT_FSIZE, bytes */
	int	 processes;		/* tasks inside, threads and the
					   kernel's own included */
	int64_t	 tmp_size;		/* each of /tmp, /dev/shm, and a
					   volume-less /workspace, bytes */
};

struct sandbox_spec {
	const char		*kernel;	/* host fleet_kernel.py */
	const char		*python;	/* /usr/bin/python3, in /usr */
	const char		*volume;	/* host dir at /workspace,
						   NULL: an empty tmpfs */
	int			 slot;		/* unique among live ones */
	uid_t			 uid_base;	/* as root: uid base + slot, gid
						   base; 0: SANDBOX_UID_BASE */
	struct sandbox_limits	 limits;
	const char *const	*env;		/* "NAME=value", NULL-ended */
};

struct sandbox {
	pid_t	 pid;		/* the keeper (see above), or -1 */
	int	 in;		/* the kernel's stdin: requests */
	int	 out;		/* the kernel's stdout: events */
	int	 err;		/* bwrap's and early python's stderr */
};

/*
 * 0 if bwrap and unprivileged user namespaces work here; else -1 and a
 * message saying so, and the caller must refuse to run any code.
 */
int	sandbox_local_probe(char *, size_t);

/*
 * Start one kernel.  Returns as soon as bwrap is exec'd: the caller
 * reads the kernel's ready line itself.  The descriptors are O_CLOEXEC
 * and blocking.  On failure, -1, a message, and sb is safe to destroy.
 */
int	sandbox_local_spawn(const struct sandbox_spec *, struct sandbox *,
	    char *, size_t);

/*
 * Kill every process of the sandbox, reap the keeper and close the
 * descriptors that are not -1 (set one to -1 to keep it), within about
 * SANDBOX_DESTROY_MS.  Idempotent, on any sb that spawn has filled in.
 */
void	sandbox_local_destroy(struct sandbox *);

#endif
