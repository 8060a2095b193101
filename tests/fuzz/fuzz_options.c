/* fuzz_options: option and number parsing that reports instead of
 * exiting: sizes, HOST:PORT, model dims for every architecture, the
 * names of architectures, optimizers and parameter-server modes, and
 * {rank}/{world} substitution. The input is one string. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/ps.h"
#include "nn/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum nn_arch archs[] = { NN_MLP, NN_BLOCK, NN_GPT };
	char host[256], err[256], *s, *sub;
	struct nn_dims dims;
	enum nn_optim_kind ok;
	enum nn_arch arch;
	enum ps_mode pm;
	size_t v, i;
	int port;

	if (size > 4096 || (s = malloc(size + 1)) == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (cli_size_value(s, &v) == 0 && strlen(s) == 0)
		abort();	/* an empty size is not a size */
	if (cli_hostport_parse(s, host, sizeof host, &port) == 0 &&
	    (port < 1 || port > 65535 || strlen(host) >= sizeof host))
		abort();
	for (i = 0; i < sizeof archs / sizeof archs[0]; i++)
		nn_dims_parse(s, archs[i], &dims, err, sizeof err);
	nn_arch_parse(s, &arch);
	nn_optim_parse(s, &ok);
	ps_mode_parse(s, &pm);
	sub = cli_subst(s, 3, 17);
	free(sub);
	free(s);
	return 0;
}
