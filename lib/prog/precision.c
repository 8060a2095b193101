/* precision: --precision, read and put in force alike by the training
 * programs (precision.h). */

#include "cli/cli.h"
#include "prog/precision.h"

int
prog_precision_option(enum nn_precision *p, int opt, const char *a)
{
	if (opt != PRECISION_OPT)
		return 0;
	if (nn_precision_parse(a, p) < 0)
		cli_usage_error("--precision: want f32 or bf16, not '%s'", a);
	return 1;
}

void
prog_precision_start(enum nn_precision p)
{
	char e[COLLX_ERRLEN];

	if (nn_set_precision(p, e, sizeof(e)) < 0)
		cli_usage_error("--precision %s: %s", nn_precision_name(p), e);
	if (p == NN_PREC_F32)
		return;
	if (nn_gemm_portable() && cli_rank == 0 && !cli_quiet)
		cli_warn("--precision bf16: this CPU has no AVX512-BF16 or AMX "
		    "(as oneDNN sees it): the portable path computes the same "
		    "values, slower");
}
