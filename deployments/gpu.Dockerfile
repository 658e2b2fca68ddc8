# The project with CUDA torch: the image of the `gpu` work pool (compose worker, Docker and
# Kubernetes job templates). The bundle is expected under /opt/shared/data (mount or COPY it).
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/deepsummit
COPY pyproject.toml README.md prefect.yaml ./
COPY src src
COPY deployments deployments
RUN python3.11 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128 \
    && /opt/venv/bin/pip install --no-cache-dir -e .
# NVML bindings: MLflow logs the GPU's utilisation, memory and power with each training run.
RUN /opt/venv/bin/pip install --no-cache-dir nvidia-ml-py==13.580.82
ENV PATH=/opt/venv/bin:$PATH \
    DEEPSUMMIT_PROJECT_DIR=/opt/deepsummit \
    DEEPSUMMIT_PATHS__DATA_DIR=/opt/shared/data \
    DEEPSUMMIT_PROFILE=base
