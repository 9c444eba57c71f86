__version__ = "0.7.2.dev0+b12x"
