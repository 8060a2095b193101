/* blas: which of OpenBLAS's kernel sets computes the f32 products, and
 * whether a faster one fits this CPU. OpenBLAS picks its set by the CPU's
 * model when it loads; a model newer than the library gets its oldest
 * x86-64 set: Debian 12's OpenBLAS runs Prescott's SSE3 kernels on an
 * Emerald Rapids Xeon, sgemm at 30 GFLOP/s a core where SkylakeX's run
 * 150. OPENBLAS_CORETYPE names a set before the library loads; collx
 * says so rather than re-running itself with it, as the two sets' sums
 * round differently. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "nn/nn.h"

/* The widest vector instructions a kernel set uses: 3 AVX-512, 2 AVX2
 * with FMA, 0 older ones (names as openblas_get_corename() gives them). */
static int
core_level(const char *core)
{
	static const char *const avx512[] = { "SkylakeX", "Cooperlake",
	    "SapphireRapids" };
	static const char *const avx2[] = { "Haswell", "Zen", "Excavator" };

	for (size_t i = 0; i < sizeof avx512 / sizeof avx512[0]; i++)
		if (!strcasecmp(core, avx512[i]))
			return 3;
	for (size_t i = 0; i < sizeof avx2 / sizeof avx2[0]; i++)
		if (!strcasecmp(core, avx2[i]))
			return 2;
	return 0;
}

const char *
nn_blas_advice(const char *core, int cpu_avx512, int cpu_avx2)
{
	int level = core_level(core);

	if (cpu_avx512 && level < 3)
		return "SkylakeX";
	if (cpu_avx2 && level < 2)
		return "Haswell";
	return NULL;
}

/* SkylakeX's kernels need AVX-512 F, CD, BW, DQ and VL (and the kernel's
 * saving of their registers, which these checks include). */
static void
cpu_vectors(int *avx512, int *avx2)
{
	*avx512 = *avx2 = 0;
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	*avx2 = __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("fma");
	*avx512 = __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512cd") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vl");
#endif
}

static int
coretype_forced(void)
{
	const char *forced = getenv("OPENBLAS_CORETYPE");

	return forced && *forced;
}

const char *
nn_blas_better_core(void)
{
	int avx512, avx2;

	/* bf16 on oneDNN: OpenBLAS computes none of the products */
	if (coretype_forced() || (nn_get_precision() != NN_PREC_F32 &&
	    !nn_gemm_portable()))
		return NULL;
	cpu_vectors(&avx512, &avx2);
	return nn_blas_advice(openblas_get_corename(), avx512, avx2);
}

const char *
nn_blas_kernels(void)
{
	static char s[256];
	const char *better = nn_blas_better_core();

	snprintf(s, sizeof s, "OpenBLAS sgemm, %s kernels (%s%s%s%s)",
	    openblas_get_corename(), coretype_forced() ?
	    "chosen by OPENBLAS_CORETYPE" : "OpenBLAS's choice for this CPU",
	    better ? "; OPENBLAS_CORETYPE=" : "", better ? better : "",
	    better ? " runs faster ones" : "");
	return s;
}
