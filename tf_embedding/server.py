"""`python -m tf_embedding.server`: the command every `ps` and `worker` task of a
parameter-server cluster runs (README.md, docs/parameter_server.md). It only runs the task's
code, `tf_embedding.cluster.server`; import that module, not this one."""

if __name__ == "__main__":
    import sys

    from tf_embedding.cluster.server import main

    sys.exit(main())
