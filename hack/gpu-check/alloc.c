// gpu-alloc: GPU 0 through libcuda.so.1 loaded at run time (no CUDA toolkit
// needed), for hack/device-check.sh.
//
//   gpu-alloc <MiB> [hold-seconds]   create a context and allocate MiB of
//                                    device memory (held that long)
//   gpu-alloc load <seconds>         keep the GPU busy: fill a 256 MiB
//                                    buffer with cuMemsetD32 again and again,
//                                    waiting for each fill
//
// Exit 0: done; 1: libcuda missing; 2: no context; 3: the allocation (or a
// fill) failed; 64: usage.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*cuInit_t)(unsigned);
typedef int (*cuDeviceGet_t)(int *, int);
typedef int (*cuCtxCreate_t)(void **, unsigned, int);
typedef int (*cuMemAlloc_t)(unsigned long long *, size_t);
typedef int (*cuMemsetD32_t)(unsigned long long, unsigned, size_t);
typedef int (*cuCtxSynchronize_t)(void);

static int load(void *h, unsigned long long buf, size_t words, int secs) {
	cuMemsetD32_t cuMemsetD32 = (cuMemsetD32_t)dlsym(h, "cuMemsetD32_v2");
	cuCtxSynchronize_t cuCtxSynchronize = (cuCtxSynchronize_t)dlsym(h, "cuCtxSynchronize");
	time_t end = time(0) + secs;
	unsigned long fills = 0;
	int r;
	while (time(0) < end) {
		if ((r = cuMemsetD32(buf, (unsigned)fills, words)) != 0 || (r = cuCtxSynchronize()) != 0) {
			printf("fill: CUDA error %d\n", r);
			return 3;
		}
		fills++;
	}
	printf("load: %lu fills of %zu MiB in %d s (pid %d)\n", fills, (words * 4) >> 20, secs, getpid());
	return 0;
}

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: gpu-alloc <MiB> [hold-seconds] | gpu-alloc load <seconds>\n");
		return 64;
	}
	int busy = strcmp(argv[1], "load") == 0;
	size_t mib = busy ? 256 : strtoull(argv[1], 0, 10);
	int secs = argc > 2 ? atoi(argv[2]) : 0;
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
		return 1;
	}
	cuInit_t cuInit = (cuInit_t)dlsym(h, "cuInit");
	cuDeviceGet_t cuDeviceGet = (cuDeviceGet_t)dlsym(h, "cuDeviceGet");
	cuCtxCreate_t cuCtxCreate = (cuCtxCreate_t)dlsym(h, "cuCtxCreate_v2");
	cuMemAlloc_t cuMemAlloc = (cuMemAlloc_t)dlsym(h, "cuMemAlloc_v2");
	int dev, r;
	void *ctx;
	if ((r = cuInit(0)) != 0 || (r = cuDeviceGet(&dev, 0)) != 0 || (r = cuCtxCreate(&ctx, 0, dev)) != 0) {
		printf("context: CUDA error %d\n", r);
		return 2;
	}
	unsigned long long ptr;
	if ((r = cuMemAlloc(&ptr, mib << 20)) != 0) {
		printf("alloc %zu MiB: CUDA error %d\n", mib, r);
		return 3;
	}
	if (busy)
		return load(h, ptr, (mib << 20) / 4, secs);
	printf("alloc %zu MiB: ok (pid %d)\n", mib, getpid());
	fflush(stdout);
	if (secs > 0)
		sleep(secs);
	return 0;
}
