"""Builds, checks and times on the GPU: the harness, its worker process, the reference rows,
nvcc's resource report, MetaSchedule tuning and the roofline's bandwidth.

Imports from results/ and schedules/ only.
"""
