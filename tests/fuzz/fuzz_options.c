/* fuzz_options: option and number parsing that reports instead of
 * exiting: sizes, HOST:PORT, model dims for every architecture, the
 * names of architectures, optimizers and parameter-server modes, the
 * library's option values (sizes, integers, lists: collx-bench's and
 * the training programs' options), and {rank}/{world} substitution. The input is one string. */
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
	long list[8];
	int port, n, iv;

	if (size > 4096 || (s = malloc(size + 1)) == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (cli_size_value(s, &v) == 0 && strlen(s) == 0)
		abort();	/* an empty size is not a size */
	if (cli_hostport_parse(s, host, sizeof host, &port) == 0 &&
	    (port < 1 || port > 65535 || strlen(host) >= sizeof host))
		abort();
	err[0] = '\0';
	if (cli_size_arg("-b", s, &v, err, sizeof err) < 0 && err[0] == '\0')
		abort();	/* a refusal says why */
	if ((n = cli_list_value("--pair", s, list, 8, err, sizeof err)) > 8)
		abort();
	if (cli_int_value("--dp", s, 1, 1 << 20, &iv, err, sizeof err) == 0 &&
	    (iv < 1 || iv > 1 << 20))
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
