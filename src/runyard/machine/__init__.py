"""This machine's resources and the health of the configured remote machines, in AxonX
0.2.2's answer shapes (``machine_status``, ``list_machines``; :mod:`runyard.api.machine_jobs`).

:mod:`.models` holds the shapes, :mod:`.metrics` reads CPU and memory with psutil and the
build, :mod:`.gpus` reads NVIDIA GPUs through NVML where ``nvidia-ml-py`` and a driver are
present. :mod:`runyard.api.machine_health` asks each ``targets`` entry for its status.
"""
