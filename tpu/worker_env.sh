# Sourced by `tpu/tpu.py launch` on every TPU VM worker just before GenEnv starts.
#
# On a multi-host slice (more than one worker) it exports JAX_COORDINATOR_ADDRESS = worker 0's
# address and port 8482, the address JAX itself would choose. That variable is what makes
# genenv_jax.parallel.initialize_distributed() call jax.distributed.initialize() (Cloud TPU VMs do
# not set TPU_WORKER_HOSTNAMES in an ssh session); JAX then reads the number of processes and this
# worker's id from the TPU metadata server. On a single-host VM, off Cloud TPU, or when the variable
# is already set, it changes nothing.
if [ -z "${JAX_COORDINATOR_ADDRESS:-}" ]; then
    _genenv_endpoints=$(curl -sf -m 5 -H 'Metadata-Flavor: Google' \
        http://metadata.google.internal/computeMetadata/v1/instance/attributes/worker-network-endpoints \
        || true)
    # "name:id:10.0.0.2,name:id:10.0.0.3" (or plain hostnames), worker 0 first.
    case "$_genenv_endpoints" in
        *,*)
            _genenv_first=${_genenv_endpoints%%,*}
            export JAX_COORDINATOR_ADDRESS="${_genenv_first##*:}:8482"
            ;;
    esac
    unset _genenv_endpoints _genenv_first
fi
