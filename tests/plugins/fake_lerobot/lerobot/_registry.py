"""A choice registry like draccus's: ``@Base.register_subclass(name)``, lookups by name."""

from __future__ import annotations

from typing import Any, ClassVar


class ChoiceRegistry:
    _choices: ClassVar[dict[str, type]]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "_choices" not in cls.__dict__ and not hasattr(cls, "_registry_root"):
            cls._choices = {}
            cls._registry_root = cls  # type: ignore[attr-defined]

    @classmethod
    def register_subclass(cls, name: str) -> Any:
        def deco(sub: type) -> type:
            if name in cls._choices:
                raise ValueError(f"{name!r} is already registered")
            cls._choices[name] = sub
            return sub

        return deco

    @classmethod
    def get_choice_class(cls, name: str) -> type:
        try:
            return cls._choices[name]
        except KeyError:
            raise KeyError(
                f"no {cls.__name__} named {name!r}; known: {sorted(cls._choices)}"
            ) from None

    @classmethod
    def get_known_choices(cls) -> dict[str, type]:
        return dict(cls._choices)

    @classmethod
    def get_choice_name(cls, sub: type) -> str:
        for name, c in cls._choices.items():
            if c is sub:
                return name
        raise KeyError(f"{sub.__name__} is not registered")

    @property
    def type(self) -> str:
        return self.get_choice_name(type(self))


def device_for(config: Any) -> Any:
    """The device of a third-party config: ``FooConfig`` → class ``Foo`` in the config's
    package (or its ``foo`` module), built with the config; as lerobot finds plugins' devices."""
    import importlib

    name = type(config).__name__
    if not name.endswith("Config"):
        raise ValueError(f"config class {name!r} does not end with 'Config'")
    device = name[: -len("Config")]
    module = type(config).__module__
    parent = module.rsplit(".", 1)[0] if "." in module else module
    for candidate in (parent, f"{parent}.{device.lower()}"):
        try:
            mod = importlib.import_module(candidate)
        except ImportError:
            continue
        cls = getattr(mod, device, None)
        if cls is not None:
            return cls(config)
    raise ImportError(f"no class {device} next to {module}")
