/* SPDX-License-Identifier: MIT */
/*
 * phoenix.h - the whole public API of libphoenix.
 *
 * libphoenix moves bytes between files and device (GPU) memory without a
 * host buffer as large as the transfer.  It knows three kinds of device:
 *
 *   cuda  NVIDIA GPUs through the CUDA driver API (loaded with dlopen).
 *   sim   a simulated device whose memory lives in host RAM, with a
 *         capacity, explicit asynchronous copies and streams, so that every
 *         feature runs where there is no GPU.
 *   kmod  device memory that the phx.ko kernel module exposes as
 *         ZONE_DEVICE pages; transfers to it are peer-to-peer.
 *
 * Conventions:
 *   - every name starts with phx_ / PHX_;
 *   - functions return 0 (or a count) on success and a negative errno on
 *     failure; nothing is reported through the global errno;
 *   - phx_strerror_last() gives a one-line, human-readable description of the
 *     last failure in the calling thread (what, where, why, what next);
 *   - objects are opaque; whoever creates one destroys it;
 *   - unless a function says otherwise it is thread-safe, and functions that
 *     move data block until the data has moved.
 */
#ifndef PHOENIX_H
#define PHOENIX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PHX_VERSION_MAJOR 0
#define PHX_VERSION_MINOR 1
#define PHX_VERSION_PATCH 0

/*
 * A device address: a CUdeviceptr on cuda.  On sim and kmod it is the
 * host virtual address of the memory in this process (what
 * phx_buf_host_view() returns for a buffer's start), so memory of the
 * simulated device can be handed to host code in tests.
 */
typedef uint64_t phx_dptr_t;

struct phx_device;
struct phx_buf;
struct phx_stream;
struct phx_batch;

enum phx_device_kind {
	PHX_DEVICE_NONE = 0,
	PHX_DEVICE_CUDA = 1,
	PHX_DEVICE_SIM = 2,
	PHX_DEVICE_KMOD = 3,
};

/* The data path that moved (the bulk of) a transfer's bytes. */
enum phx_path {
	PHX_PATH_NONE = 0, /* nothing moved (length 0, or EOF) */
	PHX_PATH_STAGED = 1, /* O_DIRECT io_uring into pinned staging */
	PHX_PATH_BUFFERED = 2, /* page-cache io_uring into pinned staging */
	PHX_PATH_P2P = 3, /* straight between disk and device memory */
	PHX_PATH_MEMCPY = 4, /* host memory <-> device copy, no file */
	/*
	 * phxfs: the kernel serves the file from its backing file (FUSE
	 * passthrough); these bytes never pass through the library.
	 */
	PHX_PATH_PASSTHROUGH = 5,
	PHX_PATH_COUNT
};

struct phx_device_info {
	char name[16]; /* "gpu0", "sim0", "phx0": phxfs's dir */
	enum phx_device_kind kind; /* backend */
	int index; /* ordinal within the backend */
	char model[64]; /* "NVIDIA H200", "simulated" */
	uint64_t capacity; /* bytes of device memory */
	uint64_t used; /* bytes held by libphoenix buffers */
	uint64_t free; /* bytes the device reports free */
	int numa_node; /* host NUMA node closest to it, or -1 */
};

/* ---- library -------------------------------------------------------- */

/**
 * phx_version() - the library version as "MAJOR.MINOR.PATCH".
 */
const char *phx_version(void);

/**
 * phx_strerror_last() - describe the last failure of the calling thread.
 *
 * Returns a one-line message owned by the library, valid until the next
 * libphoenix call in this thread.  Never NULL ("" when nothing failed).
 */
const char *phx_strerror_last(void);

/**
 * phx_default_kind() - the device kind that phx_device_open(NULL) picks.
 * @why: if not NULL, receives a static string explaining the choice
 *	 ("PHX_DEVICE=sim", "no usable CUDA driver: libcuda.so.1 not found").
 *
 * PHX_DEVICE=cuda|sim|kmod forces a kind; otherwise cuda when a GPU is
 * usable, else sim.  Thread-safe; probes the CUDA driver once.
 */
enum phx_device_kind phx_default_kind(const char **why);

/**
 * phx_kind_name() - "cuda", "sim", "kmod" or "none".
 */
const char *phx_kind_name(enum phx_device_kind kind);

/**
 * phx_kind_parse() - the device kind a word names.
 * @name: "cuda" (or "gpu"), "sim", "kmod" (or "phx"); "auto", "" and
 *	  NULL give PHX_DEVICE_NONE, the default kind.
 *
 * The one parser of kind names (PHX_DEVICE, device names, command
 * lines).  Returns 0 or -EINVAL with a message.
 */
int phx_kind_parse(const char *name, enum phx_device_kind *out);

/**
 * phx_path_name() - "staged", "buffered", "p2p", "memcpy", "passthrough"
 * or "none".
 */
const char *phx_path_name(enum phx_path path);

/* ---- devices -------------------------------------------------------- */

/**
 * phx_device_list() - enumerate the devices of one kind.
 * @kind: PHX_DEVICE_NONE means the default kind (phx_default_kind()).
 * @infos: array to fill, may be NULL when @max is 0.
 * @max: capacity of @infos.
 *
 * Returns the number of devices of that kind (which may exceed @max), or
 * -ENODEV when the backend is unusable (no driver, no GPU, no module).
 * The number of simulated devices is PHX_SIM_DEVICES (default 1).
 */
int phx_device_list(enum phx_device_kind kind, struct phx_device_info *infos,
		    int max);

/**
 * phx_device_open() - open a device by name.
 * @name: "gpu0", "sim1", "phx0", "cuda:0", "sim:1", or NULL / "" for
 *	  device 0 of the default kind.
 * @out: receives the device.
 *
 * Devices are reference counted: opening the same device twice returns
 * the same object with its count raised; each open needs a close.
 * The first open starts pinning the device's staging (PHX_STAGING_SIZE of
 * host memory, registered with the device) on a thread of its own, so
 * that the process's first transfer finds it ready; a transfer that
 * comes earlier waits only for the rest of that work.
 * Returns 0, -ENODEV (no such device or backend unusable) or -EINVAL.
 */
int phx_device_open(const char *name, struct phx_device **out);

/**
 * phx_device_prepare() - wait until @dev's staging is ready.
 *
 * Blocks until the staging that phx_device_open() started pinning is
 * pinned and the first transfer engine built out of it (it returns at
 * once after that, and in a child of fork(), which does not use its
 * parent's).  For a caller that wants the set-up done
 * before its first transfer (or timed apart from it); transfers never
 * need it.  Returns 0, or -ENOMEM or the device's error when the staging
 * could not be made: transfers then pin staging of their own, as they
 * would without it, and the message says so.
 */
int phx_device_prepare(struct phx_device *dev);

/**
 * phx_device_open_dptr() - open the device that holds address @dptr.
 * @kind: PHX_DEVICE_NONE for the default kind.
 *
 * For memory libphoenix did not allocate (a framework's tensor), so a
 * transfer can go to the right GPU.  Returns 0 with a new reference,
 * -ENODEV when no device of that kind holds @dptr.
 */
int phx_device_open_dptr(enum phx_device_kind kind, phx_dptr_t dptr,
			 struct phx_device **out);

/**
 * phx_device_close() - drop a reference taken by phx_device_open().
 *
 * The last close releases the device; all its buffers, streams and batches
 * must have been freed by then.  It first waits for stream-ordered
 * transfers (phx_io_enqueue()) still queued on any stream: their streams
 * must still get to them.
 */
void phx_device_close(struct phx_device *dev);

/**
 * phx_device_info() - current description of @dev (capacity and use).
 */
int phx_device_info(struct phx_device *dev, struct phx_device_info *info);

/**
 * phx_device_kind() - the backend of @dev.
 */
enum phx_device_kind phx_device_kind(const struct phx_device *dev);

/**
 * phx_device_native() - the backend's own handle for @dev.
 *
 * cuda: the CUcontext (primary context) as a pointer; sim/kmod: NULL.
 */
void *phx_device_native(struct phx_device *dev);

/**
 * phx_device_set_limit() - cap the bytes libphoenix may hold on @dev.
 * @limit: bytes; 0 means the device's capacity.
 *
 * Allocations and growth that would pass the cap fail with -ENOSPC.
 * phxfs uses it for its reserve.
 */
int phx_device_set_limit(struct phx_device *dev, uint64_t limit);

/* ---- buffers -------------------------------------------------------- */

enum phx_buf_flags {
	/*
	 * Device memory is committed only where data is written (by a
	 * transfer, a copy or phx_buf_commit()); reads of never-written
	 * ranges return zeros.  Without it the whole size is committed.
	 */
	PHX_BUF_SPARSE = 1 << 0,
};

/**
 * phx_buf_alloc() - allocate device memory.
 * @dev: device.
 * @size: bytes (0 allowed: an empty buffer that can grow).
 * @flags: enum phx_buf_flags.
 * @out: receives the buffer.
 *
 * Memory is reserved in address space for growth and backed in chunks,
 * so phx_buf_resize() never copies.  Returns 0, -ENOSPC (device out of
 * memory or over the limit), -EFBIG (size beyond what can be reserved),
 * -ENOMEM (host memory) or -EIO (driver failure).
 */
int phx_buf_alloc(struct phx_device *dev, uint64_t size, unsigned int flags,
		  struct phx_buf **out);

/**
 * phx_buf_free() - release a buffer and its device memory.
 *
 * The buffer must not be in use by an unfinished transfer.  Memory
 * shared with other processes (phx_buf_send()) stays alive until they
 * free their imported buffers too.
 */
void phx_buf_free(struct phx_buf *buf);

/**
 * phx_buf_resize() - grow or shrink a buffer, keeping its contents.
 * @size: new size in bytes.
 *
 * Bytes beyond the old size read as zeros.  Growing may move the buffer
 * to a new device address (the old one becomes invalid) but never copies
 * data.  Not safe against concurrent transfers on the same buffer.
 * Returns 0, -ENOSPC or -EFBIG.
 */
int phx_buf_resize(struct phx_buf *buf, uint64_t size);

/**
 * phx_buf_commit() - make sure [off, off + len) is backed by device memory.
 *
 * Needed before writing a sparse buffer through its device address from
 * outside libphoenix (a kernel, another library).  Returns 0, -ENOSPC or
 * -ERANGE.
 */
int phx_buf_commit(struct phx_buf *buf, uint64_t off, uint64_t len);

/**
 * phx_buf_size() - the buffer's size in bytes.
 */
uint64_t phx_buf_size(const struct phx_buf *buf);

/**
 * phx_buf_committed() - bytes of device memory the buffer holds now.
 */
uint64_t phx_buf_committed(const struct phx_buf *buf);

/**
 * phx_buf_next_data() - the first backed range at or after @off.
 *
 * Sets *@data_off (>= @off) and *@data_len to the first run of backed
 * bytes that ends after @off, clipped to the buffer's size; the bytes
 * between @off and *@data_off are a hole (they read as zeros and hold no
 * memory).  A hole thus runs from @off to *@data_off, and the next one
 * starts at *@data_off + *@data_len.  Backing follows the device's
 * granularity, so backed bytes may lie around what was written.
 * Returns 0, or -ENXIO when @off is at or past the end or only hole lies
 * after it (as lseek(SEEK_DATA) does).
 */
int phx_buf_next_data(struct phx_buf *buf, uint64_t off, uint64_t *data_off,
		      uint64_t *data_len);

/**
 * phx_buf_dptr() - the buffer's device address.
 *
 * Valid until the buffer is resized or freed.  Where the device is not
 * host-addressable (cuda) it must not be dereferenced on the host.
 */
phx_dptr_t phx_buf_dptr(const struct phx_buf *buf);

/**
 * phx_buf_host_view() - a host pointer to the buffer's memory, if any.
 *
 * sim and kmod buffers are host-addressable (sim through its backing
 * memory, kmod through the module's mapping); cuda returns NULL.  Like
 * phx_buf_dptr() it is invalidated by resize and free.  Never-committed
 * ranges of a sparse sim buffer read as zeros and fault when written:
 * phx_buf_commit() them first.
 */
void *phx_buf_host_view(struct phx_buf *buf);

/**
 * phx_host_register() - pin host memory for fast copies to and from @dev.
 * @p: start of the range (page aligned is best).
 * @len: bytes.
 *
 * Copies from pinned memory run at the bus's speed; pageable memory is
 * staged by the driver at a fraction of it.  A no-op on sim and kmod.
 * Returns 0, -ENOMEM (cannot pin: memlock limit) or -EEXIST.
 */
int phx_host_register(struct phx_device *dev, void *p, size_t len);

/**
 * phx_host_unregister() - undo phx_host_register() before freeing @p.
 */
void phx_host_unregister(struct phx_device *dev, void *p);

/**
 * phx_host_alloc() - pinned host memory for copies to and from @dev.
 * @len: bytes (rounded up to pages).
 *
 * Given back with phx_host_free(), a buffer stays pinned in a pool of the
 * device and the next phx_host_alloc() of the same size takes it, so a
 * program copying through a few buffers (a FUSE server's replies) pins
 * nothing per copy.  At most 64 MiB per device are pinned this way at
 * once: past that -EBUSY (use other memory).  Where pinning is refused
 * (memlock limit) the memory comes unpinned: copies are staged, still
 * right.  Returns 0, -EINVAL (0 bytes), -EBUSY or -ENOMEM.
 */
int phx_host_alloc(struct phx_device *dev, size_t len, void **out);

/**
 * phx_host_free() - give back @p from phx_host_alloc(@len).
 */
void phx_host_free(struct phx_device *dev, void *p, size_t len);

/**
 * phx_buf_device() - the device a buffer lives on (no new reference).
 */
struct phx_device *phx_buf_device(const struct phx_buf *buf);

/**
 * phx_buf_send() - share a buffer with another process.
 * @sock: a connected AF_UNIX stream socket.
 *
 * Sends the buffer's size, layout and memory handles (file descriptors
 * over SCM_RIGHTS).  The receiver calls phx_buf_recv().  Blocks until
 * everything is sent.  Returns 0 or a negative errno.
 */
int phx_buf_send(struct phx_buf *buf, int sock);

/**
 * phx_buf_recv() - open a buffer that another process sent.
 * @dev: the same device the sender's buffer is on (by name).
 * @sock: the socket the sender used.
 * @out: receives an imported buffer that maps the same memory.
 *
 * The imported buffer reads and writes the sender's memory in place; it
 * cannot be resized, and freeing it releases only this mapping.
 */
int phx_buf_recv(struct phx_device *dev, int sock, struct phx_buf **out);

/* ---- transfers ------------------------------------------------------ */

enum phx_op {
	PHX_OP_READ = 0, /* file -> device */
	PHX_OP_WRITE = 1, /* device -> file */
};

/*
 * One transfer.  The destination is @buf + @buf_off when @buf is set,
 * otherwise the raw device address @dptr on @dev (memory libphoenix did
 * not allocate, e.g. a framework's tensor).
 */
struct phx_io {
	enum phx_op op;
	int fd; /* any readable/writable fd, O_DIRECT or not */
	int64_t file_off; /* >= 0, any alignment */
	struct phx_buf *buf; /* or NULL and @dptr */
	uint64_t buf_off; /* offset in @buf */
	phx_dptr_t dptr; /* used when @buf is NULL */
	uint64_t len; /* bytes */
	/* filled in on completion */
	int64_t result; /* bytes moved or negative errno */
	enum phx_path path; /* data path that moved the bulk of them */
	void *user_data; /* untouched */
};

/**
 * phx_io_run() - perform one transfer synchronously.
 * @dev: the device of the destination.
 * @io: the transfer; result and path are filled in.
 *
 * Reads are short only at end of file (result < len); writes extend the
 * file.  Host memory used is bounded by the staging settings, whatever
 * the length.  Returns io->result.
 */
int64_t phx_io_run(struct phx_device *dev, struct phx_io *io);

/**
 * phx_read() - read @len bytes of @fd at @file_off into @buf at @buf_off.
 *
 * Blocks.  Returns the bytes read (short only at EOF) or a negative errno:
 * -EBADF (fd not open for reading), -ERANGE (range outside the buffer),
 * -ENOSPC (a sparse buffer could not be backed), -EIO.
 */
int64_t phx_read(struct phx_buf *buf, uint64_t buf_off, int fd,
		 int64_t file_off, uint64_t len);

/**
 * phx_write() - write @len bytes of @buf at @buf_off to @fd at @file_off.
 *
 * Blocks.  Returns the bytes written or a negative errno.
 */
int64_t phx_write(struct phx_buf *buf, uint64_t buf_off, int fd,
		  int64_t file_off, uint64_t len);

/**
 * phx_memcpy_to_buf() - copy host memory into a buffer (commits as needed).
 *
 * Blocks until the copy is done.  @src may be any host memory: memory
 * pinned with phx_host_register() is copied by the device directly, other
 * memory through the pinned staging of one of the device's engines.
 */
int phx_memcpy_to_buf(struct phx_buf *buf, uint64_t off, const void *src,
		      uint64_t len);

/**
 * phx_memcpy_from_buf() - copy part of a buffer into host memory.
 *
 * Never-committed ranges of sparse buffers read as zeros.  Blocks.  Host
 * memory is used as by phx_memcpy_to_buf().
 */
int phx_memcpy_from_buf(void *dst, struct phx_buf *buf, uint64_t off,
			uint64_t len);

/**
 * phx_memcpy_buf() - device-to-device copy between two buffers.
 *
 * The buffers may be on different devices of the same kind (a peer copy
 * on cuda).  Blocks.
 */
int phx_memcpy_buf(struct phx_buf *dst, uint64_t dst_off, struct phx_buf *src,
		   uint64_t src_off, uint64_t len);

/* ---- backing files --------------------------------------------------- */

/*
 * A backing file is device memory handed out as a regular file, the kind
 * FUSE passthrough accepts: its size starts at 0 and follows writes and
 * ftruncate() up to its capacity, the device memory it holds; mmap() of
 * it maps device memory.  phx.ko devices give them (the module's growable
 * ranges, whose O_DIRECT I/O is DMA into device memory); the simulated
 * device gives a memfd, whose capacity only these calls enforce; cuda
 * devices have none (-EOPNOTSUPP).  Capacity counts against the device's
 * memory and limit like a buffer's.  A backing file is used by one thread
 * at a time.
 */
struct phx_backing;

struct phx_backing_info {
	uint64_t size; /* bytes of the file now */
	uint64_t capacity; /* bytes of device memory it holds */
	int mapped; /* 1 while a process maps it (phx.ko only) */
};

/**
 * phx_backing_alloc() - a new, empty backing file on @dev.
 * @capacity: bytes of device memory to hold (rounded up to a page).
 * @out: receives it.
 *
 * Returns 0, -EOPNOTSUPP (not a phx.ko or simulated device), -ENOSPC.
 */
int phx_backing_alloc(struct phx_device *dev, uint64_t capacity,
		      struct phx_backing **out);

/**
 * phx_backing_free() - close the library's descriptor of @bk.
 *
 * The memory is freed once no other descriptor (a FUSE passthrough open,
 * a dup) and no mapping holds the file any more.
 */
void phx_backing_free(struct phx_backing *bk);

/**
 * phx_backing_fd() - the file descriptor of @bk, owned by the library.
 *
 * Its number stays the same for the life of @bk, across
 * phx_backing_reserve(), so it may be fstat()ed without a lock.  Hand it
 * to fuse_passthrough_open(); do not close it.
 */
int phx_backing_fd(const struct phx_backing *bk);

/**
 * phx_backing_info() - size, capacity and whether @bk is mapped.
 */
int phx_backing_info(struct phx_backing *bk, struct phx_backing_info *out);

/**
 * phx_backing_reserve() - make room for @capacity bytes.
 *
 * A no-op when the capacity is already there.  Otherwise the bytes move
 * to a larger allocation (through the engine) that takes over the same
 * descriptor number; descriptors the kernel holds (passthrough opens)
 * keep the old memory, so call it only when none is open.  Returns 0,
 * -EBUSY (the file is mapped), -ENOSPC.
 */
int phx_backing_reserve(struct phx_backing *bk, uint64_t capacity);

/**
 * phx_backing_trim() - give the capacity past the size back to the device.
 *
 * Returns 0; on phx.ko the room stays while I/O still pins it.
 */
int phx_backing_trim(struct phx_backing *bk);

/**
 * phx_backing_read() - copy [@off, @off + @len) of @bk to host memory.
 *
 * Blocks.  Returns the bytes copied (short only at the file's end) or a
 * negative errno.
 */
int64_t phx_backing_read(struct phx_backing *bk, uint64_t off, void *dst,
			 uint64_t len);

/**
 * phx_backing_write() - copy host memory into @bk at @off, extending it.
 *
 * Blocks.  Returns 0, -EFBIG (past the capacity: phx_backing_reserve()
 * first) or a negative errno.
 */
int phx_backing_write(struct phx_backing *bk, uint64_t off, const void *src,
		      uint64_t len);

/**
 * phx_backing_io() - a transfer between a file and a backing file.
 * @io: @buf must be NULL; @buf_off is the offset in @bk; @op, @fd,
 *	@file_off and @len as for phx_io_run().  Reads (file -> @bk) extend
 *	@bk to @buf_off + @len first (within its capacity); writes must lie
 *	inside it.
 *
 * On phx.ko devices aligned ranges take the p2p path.  Blocks.  Returns
 * io->result.
 */
int64_t phx_backing_io(struct phx_backing *bk, struct phx_io *io);

/* ---- batches -------------------------------------------------------- */

enum phx_batch_flags {
	/* wait by spinning on completions instead of sleeping */
	PHX_BATCH_POLL = 1 << 0,
};

/**
 * phx_batch_create() - a context for submitting many transfers at once.
 * @dev: device of all destinations.
 * @depth: most requests in flight (0: PHX_QUEUE_DEPTH).  The staging
 *	   memory (PHX_STAGING_SIZE) is split among them, so a deep batch
 *	   of small reads costs no more host memory than a shallow one.
 * @flags: enum phx_batch_flags.
 *
 * A batch is used by one thread at a time.  It borrows one of the device's
 * pooled engines for its life (built only if none is idle) and gives it
 * back when destroyed; it never waits for one.
 */
int phx_batch_create(struct phx_device *dev, unsigned int depth,
		     unsigned int flags, struct phx_batch **out);

/**
 * phx_batch_submit() - start @n transfers.
 *
 * The array must stay valid until each entry completed (phx_batch_wait()
 * returns it).  Returns @n or a negative errno if nothing was started.
 */
int phx_batch_submit(struct phx_batch *batch, struct phx_io *ios,
		     unsigned int n);

/**
 * phx_batch_wait() - drive the batch until @min entries have completed.
 * @done: array receiving pointers to completed entries (may be NULL).
 * @max: capacity of @done.
 * @timeout_ms: -1 waits for ever, 0 drives the batch one round without
 *	waiting and collects what is done (a caller with other work between
 *	its waits keeps the transfers moving that way).
 *
 * Each completed entry has result and path set; a failed entry does not
 * stop the others.  Returns the number of entries completed by this call
 * (at most @max when @done is set), or a negative errno.
 */
int phx_batch_wait(struct phx_batch *batch, unsigned int min,
		   struct phx_io **done, unsigned int max, int timeout_ms);

/**
 * phx_batch_destroy() - wait for what is in flight and free the batch.
 */
void phx_batch_destroy(struct phx_batch *batch);

/* ---- streams -------------------------------------------------------- */

/**
 * phx_stream_create() - a device stream (an ordered queue of work).
 */
int phx_stream_create(struct phx_device *dev, struct phx_stream **out);

/**
 * phx_stream_wrap() - use a stream created elsewhere (a CUstream on cuda,
 * e.g. torch.cuda.current_stream().cuda_stream; a phx_stream_native() on
 * sim).  NULL means the device's default stream.  Destroying the wrapper
 * does not destroy the native stream.
 */
int phx_stream_wrap(struct phx_device *dev, void *native,
		    struct phx_stream **out);

/**
 * phx_stream_native() - the backend's handle for @stream (CUstream on cuda).
 */
void *phx_stream_native(struct phx_stream *stream);

/**
 * phx_stream_sync() - wait until all work queued on @stream is done.
 */
int phx_stream_sync(struct phx_stream *stream);

/**
 * phx_stream_destroy() - free @stream.
 *
 * A stream from phx_stream_create() is synchronized and destroyed; a
 * wrapper from phx_stream_wrap() is only freed, without touching the
 * native stream (which its owner may have destroyed already).
 */
void phx_stream_destroy(struct phx_stream *stream);

/*
 * What a stream's owner promises about the parameters of its transfers
 * (phx_stream_set_flags(); the values of cuFileStreamRegister()'s flags):
 * the value behind each pointer is final when phx_io_enqueue() is called.
 */
#define PHX_STREAM_FIXED_BUF_OFFSET 0x1u
#define PHX_STREAM_FIXED_FILE_OFFSET 0x2u
#define PHX_STREAM_FIXED_SIZE 0x4u
#define PHX_STREAM_FIXED                                              \
	(PHX_STREAM_FIXED_BUF_OFFSET | PHX_STREAM_FIXED_FILE_OFFSET | \
	 PHX_STREAM_FIXED_SIZE)

/**
 * phx_stream_set_flags() - set @stream's PHX_STREAM_FIXED_* flags.
 *
 * With all three (PHX_STREAM_FIXED), phx_io_enqueue() reads the values
 * when it is called and queues the transfer's copies on the stream
 * itself: the copy engine moves the bytes, at phx_read()'s speed.
 * Without them the values are read when the stream gets there, which
 * only the copy kernel can follow (slower; see phx_io_enqueue()).
 * With them a read may go to the file before the stream gets there, once
 * the stream-ordered writes queued before it are in the file; a value
 * changed after queueing fails the transfer with -EINVAL, the buffer
 * holding the bytes of the values as queued, or zeros.
 * Returns 0, or -EINVAL for unknown flags.
 */
int phx_stream_set_flags(struct phx_stream *stream, unsigned int flags);

/**
 * phx_io_enqueue() - a stream-ordered transfer.
 * @stream: the transfer starts when @stream reaches this point, and work
 *	    queued after it waits until it is done.
 * @op: PHX_OP_READ or PHX_OP_WRITE.
 * @dptr: device address of the buffer base.
 * @len, @file_off, @buf_off: read when the stream reaches the transfer,
 *	    as cuFileReadAsync does, or now on a stream with
 *	    PHX_STREAM_FIXED (phx_stream_set_flags()).
 * @bytes_done: written with the bytes moved or a negative errno when the
 *	    transfer completes.
 *
 * All pointers must stay valid until then.  Returns 0 when queued.  Blocks
 * while the driver's queue for @stream is full (CUDA takes about a
 * thousand operations on a stream), as any launch on that stream would.
 *
 * How the stream is held while a worker thread moves the bytes
 * (PHX_STREAM_WAIT): "copy" (the default on CUDA and the simulated
 * device), the transfer's copies are queued on the stream between waits
 * on words of mapped host memory (cuStreamWaitValue32) that the worker
 * sets as it reads the file into, or writes it from, a ring of pinned
 * slots; the worker makes no driver call while the stream waits, and no
 * kernel occupies the GPU.  This needs the values fixed (above); other
 * transfers, and reads past the end of the file as it is when queued,
 * take the copy kernel.  "kernel", a copy kernel on the stream announces
 * that the stream reached it and copies the bytes the worker stages in
 * mapped host memory (slower: the kernel's loads cross PCIe).  "device",
 * a host function hands the transfer over and the stream waits on a
 * flag (the default on phx.ko devices); "host", a host function waits
 * for the worker.  On CUDA host and device can hang while another thread
 * is in a driver call that waits for the GPU (README, "Known problems").
 * At most 4096 transfers (1024 per ring in copy mode) can be queued on
 * a device at once; past that, -EBUSY.
 */
int phx_io_enqueue(struct phx_stream *stream, enum phx_op op, int fd,
		   phx_dptr_t dptr, const uint64_t *len,
		   const int64_t *file_off, const int64_t *buf_off,
		   int64_t *bytes_done);

/* ---- settings ------------------------------------------------------- */

/* O_DIRECT use (PHX_DIRECT). */
enum phx_direct {
	/*
	 * unless the range is mostly in the page cache, or the file system's
	 * first long cold read found the page cache faster there (it reads
	 * a staging's worth each way, the rest the faster way, and the
	 * process keeps the answer per file system)
	 */
	PHX_DIRECT_AUTO = -1,
	PHX_DIRECT_OFF = 0,
	PHX_DIRECT_ON = 1, /* fail where the file system refuses it */
};

/* How a stream is held during a stream-ordered transfer (PHX_STREAM_WAIT). */
enum phx_stream_wait {
	PHX_STREAM_WAIT_AUTO = -1, /* copy, or device on phx.ko devices */
	PHX_STREAM_WAIT_HOST = 0, /* a host function waits for the worker */
	PHX_STREAM_WAIT_DEVICE = 1, /* the stream waits on a flag */
	PHX_STREAM_WAIT_KERNEL = 2, /* the copy kernel holds the stream */
	PHX_STREAM_WAIT_COPY = 3, /* the stream's own copies, between waits */
};

/*
 * Tunables, each with an environment override read once at first use:
 *
 *   PHX_DEVICE         cuda | sim | kmod     default kind
 *   PHX_SIM_DEVICES    1                     number of simulated devices
 *   PHX_SIM_CAPACITY   4G                    bytes per simulated device
 *   PHX_STAGING_SIZE   64M                   pinned staging per engine
 *   PHX_CHUNK_SIZE     4M                    bytes per staged I/O
 *   PHX_QUEUE_DEPTH    16                    io_uring requests in flight
 *   PHX_ALLOC_CHUNK    64M                   largest device backing chunk
 *   PHX_DIRECT         auto | on | off       O_DIRECT use
 *   PHX_HOT_FRACTION   50                    % cached that counts as hot
 *   PHX_STREAM_WAIT    auto | copy | kernel | device | host
 *   PHX_STREAM_RINGS   1                     copy mode: rings (1-4) the
 *                                            staging is split into
 */
struct phx_settings {
	uint64_t staging_size;
	uint64_t chunk_size;
	unsigned int queue_depth;
	uint64_t alloc_chunk;
	enum phx_direct direct;
	unsigned int hot_fraction;
	unsigned int sim_devices;
	uint64_t sim_capacity;
	enum phx_stream_wait stream_wait; /* phx_io_enqueue() */
	unsigned int stream_rings; /* copy mode: rings sharing the staging */
};

/**
 * phx_settings_get() - the settings in force (defaults + environment).
 */
void phx_settings_get(struct phx_settings *out);

/**
 * phx_parse_size() - parse "4096", "64K", "4M", "1G", "2T" into bytes.
 * Returns 0 or -EINVAL.
 */
int phx_parse_size(const char *s, uint64_t *out);

/* ---- statistics ----------------------------------------------------- */

struct phx_stats {
	/* bytes moved, by enum phx_path (passthrough bytes never pass by) */
	uint64_t bytes[PHX_PATH_PASSTHROUGH];
	uint64_t ios; /* transfers completed */
	uint64_t errors; /* transfers that failed */
	uint64_t pinned_bytes; /* staging memory pinned now */
};

/**
 * phx_stats_get() - counters for @dev since it was opened.
 */
void phx_stats_get(struct phx_device *dev, struct phx_stats *out);

/*
 * The device's transfer engines (an io_uring, pinned staging, copy
 * streams each).  Synchronous transfers, batches and host copies borrow
 * them from a pool per device and give them back, so after the first
 * call none of them builds one; stream-ordered transfers have their own.
 */
struct phx_engine_stats {
	uint64_t built; /* engines built since the device opened */
	unsigned int alive; /* engines of the pool now, idle or lent */
	unsigned int idle; /* of those, waiting in the pool */
	uint64_t staging_bytes; /* host staging memory all engines hold */
};

/**
 * phx_engine_stats_get() - what @dev's engines cost now.
 *
 * Returns 0.  Does not block on transfers.
 */
int phx_engine_stats_get(struct phx_device *dev, struct phx_engine_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* PHOENIX_H */
