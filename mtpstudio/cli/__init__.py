"""The ``mtpstudio`` command: one module per subcommand over the Qt-free core."""
