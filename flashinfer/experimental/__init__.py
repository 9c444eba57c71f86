"""Experimental FlashInfer subsystems. See README.md beside this file for the policy.

Nothing here is imported by core `flashinfer`; each subsystem is imported by name.
"""
