"""The ExaMLOps namespace: ``examlops.hardware`` is examlops-policy under the E8 import path."""
