# The set-up the MoE suites share (moe.bats, train_ep.bats): a clean
# environment, the PyTorch MoE peer as the reference, and 700 seeded
# tokens of a vocabulary of 32 in tok.npy.
moe_setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE
	export PYTHONPATH=$COLLX_ROOT/tests/lib
	REF=$COLLX_ROOT/examples/peers/torch_moe.py
	"$PY" -c 'import numpy as np; np.random.seed(3)
np.save("tok.npy", np.random.randint(0, 32, size=700).astype(np.int32))'
}
