class DeviceNotConnectedError(ConnectionError):
    pass


class DeviceAlreadyConnectedError(ConnectionError):
    pass
