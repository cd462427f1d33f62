"""SkyRL plugin: the maze environment, dataset tickets, entrypoint and recipes."""
