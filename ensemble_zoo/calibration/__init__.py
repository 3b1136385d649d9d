"""Post-hoc calibration of ensemble predictions."""

from ensemble_zoo.calibration.temperature_scaling import TemperatureScaling
