# The guide's container (its code block 13), for CPUs: Debian packages only,
# no CANN.  The build stage checks the environment, builds and installs with
# the project's own scripts (the same ones the test suite runs), and checks
# the install; the runtime image holds the install and the run-time
# libraries, no compiler.
#
#   docker build -t ops-transformer-fa .
#   docker run --rm ops-transformer-fa fa2_benchmark --seq-q=1024 --dtype=bf16 --check
#   docker build --build-arg FA_VERSION=all --build-arg FA_TARGET=auto -t ops-transformer-fa .

FROM debian:bookworm-slim AS build
ARG FA_VERSION=2
ARG FA_TARGET=auto
RUN apt-get update && apt-get install -y --no-install-recommends \
        cmake g++ make pkg-config \
        nlohmann-json3-dev libyaml-cpp-dev \
        python3 python3-numpy \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace/ops-transformer
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY flash_attention/ flash_attention/
COPY layer_norm/ layer_norm/
COPY rope/ rope/
COPY glu/ glu/
COPY python/ python/
COPY examples/ examples/
COPY tests/ tests/
COPY bench/ bench/
COPY configs/ configs/
COPY scripts/ scripts/

RUN bash scripts/env_health_check.sh
RUN bash scripts/build_flash_attention.sh ${FA_VERSION} ${FA_TARGET} /opt/flash_attention
RUN bash scripts/post_build_check.sh /opt/flash_attention

FROM debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends \
        libyaml-cpp0.7 python3 python3-numpy \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/flash_attention /opt/flash_attention
COPY --from=build /workspace/ops-transformer/scripts /opt/flash_attention/share/scripts
COPY --from=build /workspace/ops-transformer/configs /opt/flash_attention/share/configs
ENV PATH=/opt/flash_attention/bin:${PATH}
WORKDIR /workspace
CMD ["fa2_benchmark", "--help"]
