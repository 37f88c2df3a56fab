"""Bank, stock and hotel APIs over Bank.json, Stock.json and Hotel.json."""

from __future__ import annotations

from genenv_jax.domains.api_bank.apis.base import ApiError, register
from genenv_jax.domains.api_bank.apis.schedule import next_id


@register("OpenBankAccount", "account:str password:str name:str")
def open_bank_account(state, account, password, name):
    """Opens `account` (kept in the state's own table: the recorded calls open accounts whatever Bank.json holds)."""
    opened = state.session.setdefault("bank_accounts", {})
    if account in opened:
        raise ApiError("The account already exists.")
    opened[account] = {"password": password, "name": name}
    return "success"


@register("QueryBalance", "token:str")
def query_balance(state, token):
    user = state.username_for_token(token)
    if user is None:
        raise ApiError("The token is incorrect.")
    bank = state.table("Bank")
    if user not in bank:
        raise ApiError("The user does not have an account.")
    return bank[user]["balance"]


@register("QueryStock", "stock_code:str date:str")
def query_stock(state, stock_code, date):
    if not str(stock_code).strip():
        raise ApiError("The stock code cannot be empty.")
    stocks = state.table("Stock")
    if stock_code not in stocks:
        raise ApiError("The stock code does not exist.")
    if date not in stocks[stock_code]:
        raise ApiError("The stock price of this date is not maintained.")
    return stocks[stock_code][date]


@register("BookHotel", "hotel_name:str check_in_time:str check_out_time:str room_count:int adult_count:int "
                       "child_count:int")
def book_hotel(state, hotel_name, check_in_time, check_out_time, room_count, adult_count, child_count):
    """Stores the order and returns its id (the next numeric id of Hotel.json)."""
    if not str(hotel_name).strip():
        raise ApiError("The hotel name cannot be empty.")
    if min(room_count, adult_count, child_count) < 0 or room_count == 0:
        raise ApiError("The room is not available.")
    if adult_count > 2:
        room_count = max(room_count, 2)   # "Two rooms are ordered if the number of adults is greater than 2."
    table = state.table("Hotel")
    order_id = next_id(table)
    table[order_id] = {"hotel_name": hotel_name, "check_in_time": check_in_time, "check_out_time": check_out_time,
                       "room_count": room_count, "adult_count": adult_count, "child_count": child_count}
    return order_id
