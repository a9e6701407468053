/* SPDX-License-Identifier: MIT */
/*
 * sim_mem.c - the simulated device's memory: reservations of address
 * space and the chunks mapped into them.
 *
 * The chunks of a reservation live in one memfd, each at the offset where
 * it is mapped in the reservation (its offset in its buffer), so a buffer
 * holds one descriptor however many chunks it has: with a descriptor per
 * chunk, a sparse file written at random grew the process's descriptor
 * table past each power of two, and growing it in a threaded process
 * waits for an RCU grace period each time.  Mapping a chunk
 * does not touch it: its pages come when copies first write them, as in
 * tmpfs (sim.c faults them in by the megabyte).  Releasing a chunk
 * punches its range out of the file: the pages go back, and the next
 * chunk there starts from a hole, so fresh memory reads as zeros.  The
 * device's capacity is the library's count of chunks
 * (phx_device_charge()), so a full device fails before anything is
 * copied.
 *
 * Exporting a chunk hands out its file: the memory of that one buffer
 * (its holes read as zeros), never another's.  The file is sealed at its
 * size, so an importer can neither cut it under this process's mappings
 * nor grow it.  The importer maps it at
 * the same offset of its own reservation, which is where a received
 * buffer puts each chunk (buf.c).  From its first export a file is
 * shared: the reservation's new chunks go to a new file and released ones
 * are not punched, so what an importer maps stays as it was until it lets
 * go, as with CUDA's exported allocations.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device.h"
#include "sim_mem.h"

/* A memfd holding chunks, each at its offset in its reservation. */
struct sim_file {
	int fd;
	unsigned int refs; /* its reservation's and chunks'; ranges_lock */
	bool shared; /* exported or imported; ranges_lock */
	uint64_t size;
	dev_t st_dev; /* imported: which file it is */
	ino_t st_ino;
	/*
	 * The process that made it: a child of fork() shares the file with
	 * it, as a GPU's memory stays its parent's, so the child's release
	 * of an inherited chunk must not punch the parent's bytes away.
	 */
	pid_t owner;
};

/* Reservations of all simulated devices, so an address finds its device. */
struct sim_range {
	uintptr_t va;
	uint64_t size;
	int index;
	struct sim_file *file; /* where its next chunk goes, or NULL */
	struct sim_range *next;
};

struct sim_chunk {
	struct sim_file *file; /* created chunks: NULL until first mapped */
	uint64_t off; /* in file, once placed */
	uint64_t size;
	bool placed;
	bool imported;
};

static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_range *ranges; /* protected by ranges_lock */

static struct sim_chunk *chunk_of(phx_chunk_t chunk)
{
	return (struct sim_chunk *)(uintptr_t)chunk;
}

/* The range holding @at, moved to the front (a buffer is used in runs). */
static struct sim_range *range_find(uintptr_t at)
{
	struct sim_range **pp, *r;

	for (pp = &ranges; (r = *pp); pp = &r->next)
		if (at >= r->va && at - r->va < r->size) {
			*pp = r->next;
			r->next = ranges;
			ranges = r;
			return r;
		}
	return NULL;
}

/* Drop a reference, ranges_lock held: the descriptor to close, or -1. */
static int file_put_locked(struct sim_file *f)
{
	int fd = f->fd;

	if (--f->refs)
		return -1;
	free(f);
	return fd;
}

static void file_put(struct sim_file *f)
{
	int fd;

	pthread_mutex_lock(&ranges_lock);
	fd = file_put_locked(f);
	pthread_mutex_unlock(&ranges_lock);
	if (fd >= 0)
		close(fd);
}

static int file_new(struct phx_device *dev, uint64_t size,
		    struct sim_file **out)
{
	struct sim_file *f = calloc(1, sizeof(*f));
	int err;

	if (!f)
		return phx_err(ENOMEM, "sim: out of host memory");
	f->owner = getpid();
	f->fd = memfd_create("phx-sim", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f->fd < 0) {
		err = errno;
		free(f);
		return phx_err(err, "%s: memfd_create: %s", dev->name,
			       strerror(err));
	}
	/*
	 * Sized once and sealed: an importer holds the same file, and one
	 * that cut it would make every mapping of the cut part fault
	 * (SIGBUS) in this process.  F_SEAL_SEAL keeps it from adding a
	 * seal that stops our own writes.  Punching holes stays possible.
	 */
	if (ftruncate(f->fd, (off_t)size) ||
	    fcntl(f->fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		err = errno;
		close(f->fd);
		free(f);
		return phx_err(
			err, "%s: sizing %llu bytes of device memory: %s",
			dev->name, (unsigned long long)size, strerror(err));
	}
	f->refs = 1;
	f->size = size;
	*out = f;
	return 0;
}

int phx_sim_locate(phx_dptr_t dptr)
{
	struct sim_range *r;
	int index;

	pthread_mutex_lock(&ranges_lock);
	r = range_find(dptr);
	index = r ? r->index : -ENODEV;
	pthread_mutex_unlock(&ranges_lock);
	return index;
}

int phx_sim_va_reserve(struct phx_device *dev, uint64_t size, phx_dptr_t *out)
{
	struct sim_range *r = calloc(1, sizeof(*r));
	phx_dptr_t va;
	int ret;

	if (!r)
		return phx_err(ENOMEM, "sim: out of host memory");
	ret = phx_fdmem_reserve(dev, size, &va);
	if (ret) {
		free(r);
		return ret;
	}
	r->va = (uintptr_t)va;
	r->size = size;
	r->index = dev->index;
	pthread_mutex_lock(&ranges_lock);
	r->next = ranges;
	ranges = r;
	pthread_mutex_unlock(&ranges_lock);
	*out = va;
	return 0;
}

void phx_sim_va_release(struct phx_device *dev, phx_dptr_t va, uint64_t size)
{
	struct sim_range **pp, *r;
	int fd = -1;

	pthread_mutex_lock(&ranges_lock);
	for (pp = &ranges; (r = *pp); pp = &r->next)
		if (r->va == va) {
			*pp = r->next;
			if (r->file)
				fd = file_put_locked(r->file);
			free(r);
			break;
		}
	pthread_mutex_unlock(&ranges_lock);
	if (fd >= 0)
		close(fd);
	munmap((void *)(uintptr_t)va, size);
}

/* Memory comes when the chunk is first mapped (chunk_place()). */
int phx_sim_chunk_create(struct phx_device *dev, uint64_t size,
			 phx_chunk_t *out)
{
	struct sim_chunk *c = calloc(1, sizeof(*c));

	if (!c)
		return phx_err(ENOMEM, "sim: out of host memory");
	c->size = size;
	*out = (phx_chunk_t)(uintptr_t)c;
	return 0;
}

void phx_sim_chunk_release(struct phx_device *dev, phx_chunk_t chunk,
			   uint64_t size)
{
	struct sim_chunk *c = chunk_of(chunk);
	bool punch;

	if (c->file && c->placed) {
		pthread_mutex_lock(&ranges_lock);
		punch = !c->file->shared && c->file->owner == getpid();
		pthread_mutex_unlock(&ranges_lock);
		/* where the hole cannot be made, no new chunk may come */
		if (punch &&
		    fallocate(c->file->fd,
			      FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)c->off, (off_t)c->size)) {
			pthread_mutex_lock(&ranges_lock);
			c->file->shared = true;
			pthread_mutex_unlock(&ranges_lock);
		}
	}
	if (c->file)
		file_put(c->file);
	free(c);
}

/*
 * Give @c its place in the reservation holding @at: a created chunk its
 * range of the reservation's file (a new file where there is none or it
 * is shared); an imported one, the same offset of the file it came in,
 * one descriptor for all the chunks of that file.
 */
static int chunk_place(struct phx_device *dev, struct sim_chunk *c,
		       uintptr_t at)
{
	struct sim_range *r;
	struct sim_file *f;
	int ret = 0, fd = -1;

	pthread_mutex_lock(&ranges_lock);
	r = range_find(at);
	if (!r) {
		ret = phx_err(
			EINVAL,
			"%s: mapping a chunk outside the device's reservations",
			dev->name);
		goto out;
	}
	c->off = at - r->va;
	if (c->imported) {
		f = r->file;
		if (f && f->shared && f->st_dev == c->file->st_dev &&
		    f->st_ino == c->file->st_ino) {
			f->refs++;
			fd = file_put_locked(c->file);
			c->file = f;
		} else if (!f) {
			r->file = c->file;
			c->file->refs++;
		}
		if (c->off + c->size > c->file->size)
			ret = phx_err(
				EINVAL,
				"%s: imported chunk at %llu is past the end of its %llu bytes",
				dev->name, (unsigned long long)c->off,
				(unsigned long long)c->file->size);
		goto out;
	}
	if (r->file && r->file->shared) {
		fd = file_put_locked(r->file);
		r->file = NULL;
	}
	if (!r->file)
		ret = file_new(dev, r->size, &r->file);
	if (!ret) {
		c->file = r->file;
		c->file->refs++;
	}
out:
	pthread_mutex_unlock(&ranges_lock);
	if (fd >= 0)
		close(fd);
	return ret;
}

/* Map @chunk at @at with protection @prot (PROT_NONE: bare, see device.h). */
static int chunk_map_prot(struct phx_device *dev, phx_dptr_t at, uint64_t size,
			  phx_chunk_t chunk, int prot)
{
	struct sim_chunk *c = chunk_of(chunk);
	void *p;
	int ret;

	if (!c->placed) {
		ret = chunk_place(dev, c, (uintptr_t)at);
		if (ret)
			return ret;
		c->placed = true;
	}
	p = mmap((void *)(uintptr_t)at, size, prot, MAP_SHARED | MAP_FIXED,
		 c->file->fd, (off_t)c->off);
	if (p == MAP_FAILED)
		return phx_err(errno, "%s: mapping device memory: %s",
			       dev->name, strerror(errno));
	return 0;
}

int phx_sim_chunk_map(struct phx_device *dev, phx_dptr_t at, uint64_t size,
		      phx_chunk_t chunk)
{
	return chunk_map_prot(dev, at, size, chunk, PROT_READ | PROT_WRITE);
}

/* Mapped but not accessible, as on a GPU before cuMemSetAccess. */
int phx_sim_chunk_map_bare(struct phx_device *dev, phx_dptr_t at, uint64_t size,
			   phx_chunk_t chunk)
{
	return chunk_map_prot(dev, at, size, chunk, PROT_NONE);
}

int phx_sim_range_access(struct phx_device *dev, phx_dptr_t at, uint64_t size)
{
	if (mprotect((void *)(uintptr_t)at, size, PROT_READ | PROT_WRITE))
		return phx_err(errno, "%s: making device memory accessible: %s",
			       dev->name, strerror(errno));
	return 0;
}

int phx_sim_chunk_export(struct phx_device *dev, phx_chunk_t chunk,
			 uint64_t size, int *fd)
{
	struct sim_chunk *c = chunk_of(chunk);

	if (!c->placed)
		return phx_err(EINVAL, "%s: exporting a chunk never mapped",
			       dev->name);
	pthread_mutex_lock(&ranges_lock);
	c->file->shared = true;
	pthread_mutex_unlock(&ranges_lock);
	*fd = fcntl(c->file->fd, F_DUPFD_CLOEXEC, 0);
	if (*fd < 0)
		return phx_err(errno, "%s: exporting a chunk: %s", dev->name,
			       strerror(errno));
	return 0;
}

int phx_sim_chunk_import(struct phx_device *dev, int fd, uint64_t size,
			 phx_chunk_t *out)
{
	struct sim_chunk *c;
	struct sim_file *f;
	struct stat st;

	if (fstat(fd, &st) || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size < size)
		return phx_err(EINVAL, "%s: imported chunk is not %llu bytes",
			       dev->name, (unsigned long long)size);
	c = calloc(1, sizeof(*c));
	f = calloc(1, sizeof(*f));
	if (!c || !f) {
		free(c);
		free(f);
		return phx_err(ENOMEM, "sim: out of host memory");
	}
	f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (f->fd < 0) {
		int err = errno;

		free(c);
		free(f);
		return phx_err(err, "%s: importing a chunk: %s", dev->name,
			       strerror(err));
	}
	f->refs = 1;
	f->shared = true;
	f->size = (uint64_t)st.st_size;
	f->st_dev = st.st_dev;
	f->st_ino = st.st_ino;
	c->file = f;
	c->size = size;
	c->imported = true;
	*out = (phx_chunk_t)(uintptr_t)c;
	return 0;
}
