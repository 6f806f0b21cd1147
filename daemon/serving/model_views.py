"""What a served model version looks like to a client: KServe v2 metadata and Triton's model
config, from its signed config.pbtxt where it has one, else from the signature its worker
reported (rtd.signature). Views only: nothing here changes or runs a model."""
from rtd.dtypes import BY_CONFIG, BY_KSERVE
from rtd.proto import model_config_pb2 as mc

PLATFORM = "rtd_onnx"


def metadata(name: str, serving) -> dict:
    """KServe v2 model metadata of a serving ModelVersion."""
    config = serving.package.config
    if config is not None and (config.input or config.output):
        batch = [-1] if config.max_batch_size > 0 else []

        def from_config(t):
            row = BY_CONFIG.get(mc.DataType.Name(t.data_type))
            return {"name": t.name, "datatype": row.kserve if row else "", "shape": batch + list(t.dims)}
        inputs, outputs = [from_config(t) for t in config.input], [from_config(t) for t in config.output]
    else:
        def from_spec(spec):
            return {"name": spec.name, "datatype": spec.datatype, "shape": spec.public_shape()}
        inputs = [from_spec(spec) for spec in serving.signature.inputs]
        outputs = [from_spec(spec) for spec in serving.signature.outputs]
    platform = (config.platform or config.backend) if config is not None else ""
    return {"name": name, "versions": [serving.version_dir], "platform": platform or PLATFORM,
            "inputs": inputs, "outputs": outputs}


def model_config(name: str, serving) -> mc.ModelConfig:
    """Triton's ModelConfig of a serving ModelVersion: the signed one, else one built from its metadata."""
    if serving.package.config is not None:
        config = mc.ModelConfig()
        config.CopyFrom(serving.package.config)
        config.name = config.name or name
        return config
    meta = metadata(name, serving)

    def enum(datatype):
        row = BY_KSERVE.get(datatype)
        return mc.DataType.Value(row.config) if row else 0
    return mc.ModelConfig(
        name=name, platform=meta["platform"],
        input=[mc.ModelInput(name=t["name"], data_type=enum(t["datatype"]), dims=t["shape"]) for t in meta["inputs"]],
        output=[mc.ModelOutput(name=t["name"], data_type=enum(t["datatype"]), dims=t["shape"]) for t in meta["outputs"]])
