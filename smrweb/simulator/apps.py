from django.apps import AppConfig


class SimulatorConfig(AppConfig):
    """The SMR simulator (`simulate_smr`): a development and test backend, not part of the product."""

    name = "smrweb.simulator"
    label = "simulator"
