// gpu-load: keeps GPU 0 busy for some seconds through libcuda.so.1 loaded at
// run time (no CUDA toolkit needed): it fills a 256 MiB buffer with
// cuMemsetD32 over and over, waiting for each fill, so the process shows in
// NVML's per-process utilization. Usage: gpu-load <seconds>. Exit 0: done;
// 1: libcuda missing; 2: no context; 3: allocation or fill failed.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int (*cuInit_t)(unsigned);
typedef int (*cuDeviceGet_t)(int *, int);
typedef int (*cuCtxCreate_t)(void **, unsigned, int);
typedef int (*cuMemAlloc_t)(unsigned long long *, size_t);
typedef int (*cuMemsetD32_t)(unsigned long long, unsigned, size_t);
typedef int (*cuCtxSynchronize_t)(void);

int main(int argc, char **argv) {
	int secs = argc > 1 ? atoi(argv[1]) : 10;
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
		return 1;
	}
	cuInit_t cuInit = (cuInit_t)dlsym(h, "cuInit");
	cuDeviceGet_t cuDeviceGet = (cuDeviceGet_t)dlsym(h, "cuDeviceGet");
	cuCtxCreate_t cuCtxCreate = (cuCtxCreate_t)dlsym(h, "cuCtxCreate_v2");
	cuMemAlloc_t cuMemAlloc = (cuMemAlloc_t)dlsym(h, "cuMemAlloc_v2");
	cuMemsetD32_t cuMemsetD32 = (cuMemsetD32_t)dlsym(h, "cuMemsetD32_v2");
	cuCtxSynchronize_t cuCtxSynchronize = (cuCtxSynchronize_t)dlsym(h, "cuCtxSynchronize");
	int dev, r;
	void *ctx;
	if ((r = cuInit(0)) != 0 || (r = cuDeviceGet(&dev, 0)) != 0 || (r = cuCtxCreate(&ctx, 0, dev)) != 0) {
		printf("context: CUDA error %d\n", r);
		return 2;
	}
	size_t words = (256u << 20) / 4;
	unsigned long long buf;
	if ((r = cuMemAlloc(&buf, words * 4)) != 0) {
		printf("alloc: CUDA error %d\n", r);
		return 3;
	}
	time_t end = time(0) + secs;
	unsigned long fills = 0;
	while (time(0) < end) {
		if ((r = cuMemsetD32(buf, (unsigned)fills, words)) != 0 || (r = cuCtxSynchronize()) != 0) {
			printf("fill: CUDA error %d\n", r);
			return 3;
		}
		fills++;
	}
	printf("load: %lu fills of 256 MiB in %d s (pid %d)\n", fills, secs, getpid());
	return 0;
}
