"""The file MLflow runs to build the registered pyfunc ("models from code"): loading a model
imports `deepsummit.serve.pyfunc` instead of unpickling a Python object."""

from mlflow.models import set_model

from deepsummit.serve.pyfunc import DeepSummitModel

set_model(DeepSummitModel())
